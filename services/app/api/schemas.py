"""Bodies of the platform's own routes: job lookup (``/internal/jobs``) and the probes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class JobQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    organization_id: int | None = Field(
        None,
        ge=1,
        le=2**63 - 1,
        description="When given, a job of another organization answers 404 like an unknown id.",
    )


class JobRecord(BaseModel):
    job_id: str
    state: str = Field(
        description="waiting, parked, delayed, active, completed, failed, record_missing, skipped"
    )
    family: str | None = None
    queue: str | None = None
    organization_id: int | None = None
    attempts: int = 0
    failures: int = 0
    created_at_ms: int | None = None
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    last_error: str | None = None


class Liveness(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["ready", "not_ready"]
    checks: dict[str, Literal["ok", "unreachable"]] = Field(
        examples=[{"redis": "ok", "postgresql": "unreachable"}]
    )
