"""Request and response bodies every route of the internal API shares: strict request bases,
enqueue answers, error bodies.

The same models validate requests and describe them in the OpenAPI document, so the two
cannot drift apart. Enqueue bodies are built per route from the registered families'
parameter models (:mod:`services.apikit.enqueue`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.inputs import Id

#: Requests accepted in one call; the body limit (SPEEDTIER_API_MAX_BODY_BYTES) also applies.
MAX_REQUESTS_PER_CALL = 1000

OrganizationId = Id


class StrictRequest(BaseModel):
    """A request body: no coercion from strings, no unknown fields."""

    model_config = ConfigDict(strict=True, extra="forbid")


class EnqueuedJob(BaseModel):
    job_id: str
    outcome: Literal["added", "replaced", "deduplicated"] = Field(
        description="added: new id; replaced: a finished id runs again; deduplicated: the id "
        "is already waiting, delayed or running (or kept after finishing) so nothing changed."
    )
    queue: str
    kind: str


class EnqueueAccepted(BaseModel):
    """202: every request is durably in Redis."""

    jobs: list[EnqueuedJob]


class ErrorBody(BaseModel):
    error: str = Field(examples=["unauthorized", "queue_unavailable", "not_found"])
    message: str | None = None


class AcceptedBeforeFailure(EnqueuedJob):
    index: int = Field(description="The request's position in the call's ``requests``.")


class UnknownOutcome(BaseModel):
    index: int = Field(description="The request's position in the call's ``requests``.")
    job_id: str


class EnqueueRefused(BaseModel):
    """503 or 504 of an enqueue: which requests are known to be enqueued, which may be.

    ``queue_unavailable`` (503): Redis unreachable or read-only; ``queue_full`` (503): Redis
    out of memory; ``enqueue_outcome_unknown`` (504): the requests in ``unknown`` were sent
    and Redis did not answer. A request in neither list was not enqueued. Sending the same
    requests again is safe: job ids are deterministic, so one already waiting, delayed or
    running is deduplicated.
    """

    error: Literal["queue_unavailable", "queue_full", "enqueue_outcome_unknown"]
    message: str
    accepted: list[AcceptedBeforeFailure] = Field(
        default_factory=list,
        description="Requests enqueued before the failure (only when the call spanned several "
        "round trips: over 500 requests, or tiers on different Redis servers).",
    )
    unknown: list[UnknownOutcome] = Field(
        default_factory=list,
        description="Requests that may or may not be enqueued (``enqueue_outcome_unknown``).",
    )


class InvalidRequestBody(BaseModel):
    """400: nothing was changed; ``fields`` maps each bad field's path to its message."""

    error: Literal["invalid_request"] = "invalid_request"
    fields: dict[str, str] = Field(
        examples=[{"requests[0].organization_id": "Input should be a valid integer"}]
    )
