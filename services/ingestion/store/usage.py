"""Usage events: what analytics counts, recorded in the caller's transaction."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from shared.db.base import utcnow
from shared.db.models.ingestion import UsageEvent

INGESTED_EVENT = "kb_document_ingested"


def record_usage_event(
    session: Session,
    *,
    organization_id: int,
    kind: str,
    subject_id: int | None,
    payload: dict[str, Any],
    now: datetime | None = None,
) -> None:
    """Record something analytics counts, in the caller's transaction."""
    session.add(
        UsageEvent(
            organization_id=organization_id,
            kind=kind,
            subject_id=subject_id,
            payload=payload,
            created_at=now or utcnow(),
        )
    )
