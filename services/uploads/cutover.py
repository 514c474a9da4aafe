"""Seed 001's cutover assertions for conversation uploads that are not plain validation
queries: the zero-new-GoodJob rows of the two retired upload classes, the attribution of
surviving ``CompleteConversationSyncJob`` rows to XCALLY through the conversation GlobalID
in their arguments, the runbook's readiness (step 1) and the per-organization canary gates
(step 2).

| assertion | passes when |
| --- | --- |
| retired upload classes | no ``CheckNewUploadsJob`` / ``ProcessDirectUploadJob`` row in 12 hours |
| XCALLY completion rows | no surviving ``CompleteConversationSyncJob`` row of the 12-hour window |
|                        | belongs to an XCALLY source of an organization whose completion flag |
|                        | is on, and every row's GlobalID resolves to a conversation            |
| readiness: scan tick | the last due ``conversation-upload-checks-tick-<slot>`` completed and |
|                      | kept ``skippedDirect`` and ``ledger_reconciled`` counts                |
| readiness: ledger empty | ``conversation_upload_deliveries`` holds no row |
| canary gates (one organization, 24 hours) | every ledger row older than the grace window |
|   | completed, none failed, no uncertain row past the grace window, no completion whose |
|   | sync never landed, no duplicate idempotency key, no ``CompleteConversationSyncJob`` row |
|   | of that organization, and the window covers the full 24 hours                        |
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from services.uploads.verdicts import Check, describe

#: The retired upload classes (seed 001, ENG-2920). Rails' namespace for the process job is
#: not written in the seed, so both spellings of each class count.
RETIRED_UPLOAD_CLASSES = (
    "ConversationUploads::CheckNewUploadsJob",
    "CheckNewUploadsJob",
    "ConversationUploads::ProcessDirectUploadJob",
    "ProcessDirectUploadJob",
)
#: GoodJob's cleanup window: older rows are historical (seed).
RETAINED = timedelta(hours=12)
#: The canary's observation window (seed 001, step 2).
CANARY_WINDOW = timedelta(hours=24)
#: The reconciler's grace: ledger rows younger than this are legitimately in flight.
LEDGER_GRACE = timedelta(minutes=10)

RETIRED_UPLOAD_GOOD_JOBS = text("""\
SELECT job_class, count(*) AS jobs, min(created_at) AS first_seen, max(created_at) AS last_seen
FROM good_jobs
WHERE job_class IN :classes
  AND created_at > now() - interval '12 hours'
GROUP BY job_class ORDER BY jobs DESC;""").bindparams(bindparam("classes", expanding=True))

#: Each surviving completion row with the conversation its serialized GlobalID names
#: (``gid://<app>/Conversation/<id>`` anywhere in the ActiveJob arguments) and that
#: conversation's data source key (conversations.organization_data_source_id ->
#: data_sources.key).
COMPLETION_GOOD_JOBS_ATTRIBUTED = text("""\
SELECT j.id AS good_job_id, j.created_at, gid.conversation_id,
       c.organization_id, ds.key AS data_source_key
FROM good_jobs j
LEFT JOIN LATERAL (
  SELECT substring(ref #>> '{}' FROM '^gid://[^/]+/Conversation/([0-9]+)$')::bigint
         AS conversation_id
  FROM jsonb_path_query(coalesce(j.serialized_params -> 'arguments', '[]'::jsonb),
                        'lax $.**._aj_globalid') AS ref
  WHERE ref #>> '{}' ~ '^gid://[^/]+/Conversation/[0-9]+$'
  LIMIT 1
) gid ON true
LEFT JOIN conversations c ON c.id = gid.conversation_id
LEFT JOIN organization_data_sources ods ON ods.id = c.organization_data_source_id
LEFT JOIN data_sources ds ON ds.id = ods.data_source_id
WHERE j.job_class = 'CompleteConversationSyncJob'
  AND j.queue_name = 'default'
  AND j.created_at > :since
ORDER BY j.created_at;""")

LEDGER_ROWS = text("SELECT count(*) FROM conversation_upload_deliveries;")

CANARY_LEDGER_ROWS = text("""\
SELECT d.id, d.kind, d.state, d.conversation_upload_id, d.last_error, d.created_at,
       d.updated_at
FROM conversation_upload_deliveries d
WHERE d.organization_id = :organization_id
  AND d.created_at > :since
ORDER BY d.created_at;""")

CANARY_COMPLETION_WITHOUT_SYNC = text("""\
SELECT d.id, d.conversation_id
FROM conversation_upload_deliveries d
JOIN conversations c ON c.id = d.conversation_id
WHERE d.kind = 'sync_completion' AND d.state = 'completed'
  AND c.last_synced_at IS NULL
  AND d.organization_id = :organization_id;""")

CANARY_DUPLICATE_IDEMPOTENCY_KEYS = text("""\
SELECT idempotency_key, count(*) AS uploads
FROM conversation_uploads
WHERE organization_id = :organization_id AND idempotency_key IS NOT NULL
GROUP BY idempotency_key HAVING count(*) > 1;""")


def _naive(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(tzinfo=None)


def retired_upload_good_jobs(session: Session) -> Check:
    """Zero new normal-path rows of ``CheckNewUploadsJob`` and ``ProcessDirectUploadJob``."""
    rows = session.execute(
        RETIRED_UPLOAD_GOOD_JOBS, {"classes": list(RETIRED_UPLOAD_CLASSES)}
    ).all()
    jobs = sum(int(row.jobs) for row in rows)
    return Check(
        jobs == 0,
        f"CheckNewUploadsJob / ProcessDirectUploadJob GoodJob rows of the last 12 hours: {jobs}"
        " (expected 0)",
        describe(rows),
    )


def attributed_completion_rows(session: Session, since: datetime) -> list[Mapping[str, Any]]:
    """Every ``CompleteConversationSyncJob`` row on ``default`` created after ``since``, with
    the conversation, organization and data source its GlobalID resolves to (None when not)."""
    rows = session.execute(COMPLETION_GOOD_JOBS_ATTRIBUTED, {"since": _naive(since)}).all()
    return [dict(row._mapping) for row in rows]


def xcally_completion_rows(
    session: Session, completion_enabled: Callable[[int], bool], now: datetime
) -> Check:
    """The surviving completion rows of GoodJob's window, attributed: one that belongs to an
    XCALLY source of an organization with the completion flag on is new normal-path
    traffic; one whose GlobalID resolves to no conversation cannot be proven not XCALLY.
    Rows of other sources, or of organizations still on the legacy path, are expected."""
    rows = attributed_completion_rows(session, now - RETAINED)
    bad: list[str] = []
    for row in rows:
        organization_id = row["organization_id"]
        if row["conversation_id"] is None or organization_id is None:
            bad.append(f"good_job {row['good_job_id']}: no Conversation GlobalID resolves")
        elif row["data_source_key"] == "xcally" and completion_enabled(int(organization_id)):
            bad.append(
                f"good_job {row['good_job_id']}: conversation {row['conversation_id']}"
                f" org {organization_id} xcally, completion flag on"
            )
    xcally = sum(1 for row in rows if row["data_source_key"] == "xcally")
    return Check(
        not bad,
        f"CompleteConversationSyncJob rows attributed to XCALLY with the flag on: {len(bad)}"
        f" ({len(rows)} surviving, {xcally} XCALLY)",
        tuple(bad),
    )


def readiness(
    session: Session, tick_job_id: str, tick_record: Mapping[str, str] | None
) -> list[Check]:
    """The runbook's step 1 beyond the first validation query: the scan's last due tick
    completed and kept its ``skippedDirect``/``ledger_reconciled`` counts, and the ledger is
    empty."""
    record = tick_record or {}
    state = record.get("state", "no record")
    summary = record.get("data:summary", "")
    counted = "skippedDirect" in summary and "ledger_reconciled" in summary
    rows = int(session.execute(LEDGER_ROWS).scalar_one())
    return [
        Check(
            state == "completed" and counted,
            f"scan tick {tick_job_id}: {state}, summary {summary or '-'}",
        ),
        Check(rows == 0, f"conversation_upload_deliveries rows: {rows} (expected 0)"),
    ]


def canary_gates(
    session: Session,
    organization_id: int,
    since: datetime,
    now: datetime,
) -> list[Check]:
    """Seed 001's step 2 gates for one organization over the window from ``since``; the
    window must cover the full 24 hours."""
    params = {"organization_id": organization_id, "since": _naive(since)}
    ledger = session.execute(CANARY_LEDGER_ROWS, params).all()
    settled_before = _naive(now - LEDGER_GRACE)
    open_rows = [r for r in ledger if r.state != "completed" and r.created_at < settled_before]
    failed = [r for r in ledger if r.state == "failed"]
    uncertain = [r for r in ledger if r.state == "uncertain" and r.updated_at < settled_before]
    unsynced = session.execute(CANARY_COMPLETION_WITHOUT_SYNC, params).all()
    duplicates = session.execute(CANARY_DUPLICATE_IDEMPOTENCY_KEYS, params).all()
    completions = [
        row
        for row in attributed_completion_rows(session, since)
        if row["organization_id"] == organization_id
    ]
    observed = now - since
    return [
        Check(
            observed >= CANARY_WINDOW,
            f"window observed: {observed.total_seconds() / 3600:.1f} h of 24 h",
        ),
        Check(
            not open_rows,
            f"ledger rows past the 10-minute grace not completed: {len(open_rows)} of"
            f" {len(ledger)} new",
            describe(open_rows),
        ),
        Check(not failed, f"failed ledger rows: {len(failed)} (expected 0)", describe(failed)),
        Check(
            not uncertain,
            f"uncertain ledger rows older than the grace window: {len(uncertain)} (expected 0)",
            describe(uncertain),
        ),
        Check(
            not unsynced,
            f"completions delivered whose sync never landed: {len(unsynced)} (expected 0)",
            describe(unsynced),
        ),
        Check(
            not duplicates,
            f"idempotency keys with more than one upload: {len(duplicates)} (expected 0)",
            describe(duplicates),
        ),
        Check(
            not completions,
            f"CompleteConversationSyncJob rows of organization {organization_id}:"
            f" {len(completions)} (expected 0)",
            tuple(
                f"good_job {row['good_job_id']}: conversation {row['conversation_id']}"
                for row in completions
            ),
        ),
    ]
