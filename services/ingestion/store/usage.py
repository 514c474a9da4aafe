"""Usage events: what analytics counts, recorded in the caller's transaction, and read back
per organization (:func:`usage_summary`, behind ``GET /usage`` and
``speedtier ingestion usage``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
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


@dataclass(frozen=True)
class UsageTotals:
    """One kind of event in one knowledge base, over a period.

    Attributes:
      events: how many were recorded; documents: distinct documents they concern.
      chunks / tokens / embedded: sums of the events' payload counts (ingestions: chunks
        written, their tokens, chunks embedded); unchanged: ingestions that found the
        content unchanged (nothing embedded).
    """

    kind: str
    knowledge_base_id: int | None
    events: int
    documents: int
    chunks: int
    tokens: int
    embedded: int
    unchanged: int
    first_at: datetime
    last_at: datetime


def _payload_number(key: str) -> str:
    return (
        f"coalesce(sum(CASE WHEN jsonb_typeof(payload->'{key}') = 'number' "
        f"THEN (payload->>'{key}')::numeric END), 0)"
    )


def usage_summary(
    session: Session,
    *,
    organization_id: int,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[UsageTotals]:
    """The organization's usage events in ``[since, until)``, totalled per kind and
    knowledge base (kind, then base, in order)."""
    kb_id = (
        "CASE WHEN jsonb_typeof(payload->'knowledge_base_id') = 'number' "
        "THEN (payload->>'knowledge_base_id')::bigint END"
    )
    statement = text(
        f"SELECT kind, {kb_id} AS kb, count(*), count(DISTINCT subject_id), "
        f"{_payload_number('chunks')}, {_payload_number('tokens')}, "
        f"{_payload_number('embedded')}, "
        "count(*) FILTER (WHERE payload->'unchanged' = 'true'::jsonb), "
        "min(created_at), max(created_at) FROM api2.usage_events "
        "WHERE organization_id = :organization_id "
        "AND (CAST(:since AS timestamptz) IS NULL OR created_at >= :since) "
        "AND (CAST(:until AS timestamptz) IS NULL OR created_at < :until) "
        "GROUP BY kind, kb ORDER BY kind, kb NULLS FIRST"
    )
    rows = session.execute(
        statement, {"organization_id": organization_id, "since": since, "until": until}
    )
    return [
        UsageTotals(
            kind=str(row[0]),
            knowledge_base_id=int(row[1]) if row[1] is not None else None,
            events=int(row[2]),
            documents=int(row[3]),
            chunks=int(row[4]),
            tokens=int(row[5]),
            embedded=int(row[6]),
            unchanged=int(row[7]),
            first_at=row[8],
            last_at=row[9],
        )
        for row in rows
    ]
