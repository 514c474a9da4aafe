"""The seed's read-only validation queries as pass/fail checks (``speedtier uploads check``).

The SQL is the seed's, verbatim (the one placeholder, ``'<deploy timestamp>'``, becomes the
bind parameter ``:deployed_at``). Each check passes when:

| check | passes when |
| --- | --- |
| pending direct uploads holding a file | none older than 45 minutes (the scanner takes them) |
| direct uploads expired after the deploy | the count is 0 |
| ledger rows in flight past the grace window | no row |
| terminal ledger failures to triage | no row (each one needs a human) |
| completion delivered, sync never landed | no row |
| zero new GoodJob for XCALLY completion | no row of the last 12 hours attributes (GlobalID) to |
|   | an XCALLY source of an organization with the completion flag on, or to no conversation |
| retired upload classes | no ``CheckNewUploadsJob`` / ``ProcessDirectUploadJob`` row in 12 hours |
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from services.uploads import cutover
from services.uploads.verdicts import Check, describe

#: A pending direct upload still holding its file older than this is a scanner bug (seed).
PENDING_DIRECT_LIMIT = timedelta(minutes=45)

PENDING_DIRECT_WITH_FILE = text("""\
SELECT u.id, u.organization_id, u.status, u.created_at
FROM conversation_uploads u
WHERE u.upload_type = 'direct'
  AND u.status = 'pending'
  AND EXISTS (SELECT 1 FROM active_storage_attachments a
              WHERE a.record_type = 'ConversationUpload'
                AND a.name = 'file' AND a.record_id = u.id)
ORDER BY u.created_at;""")

DIRECT_EXPIRED_AFTER_DEPLOY = text("""\
SELECT COUNT(*) FROM conversation_uploads
WHERE upload_type = 'direct' AND status = 'expired'
  AND updated_at > :deployed_at;""")

LEDGER_IN_FLIGHT = text("""\
SELECT d.id, d.kind, d.state, d.owner, d.attempts, d.replay_count,
       d.conversation_upload_id, d.conversation_id, d.sync_run_id,
       d.last_error, d.updated_at
FROM conversation_upload_deliveries d
WHERE d.state IN ('pending', 'sent', 'uncertain', 'accepted')
  AND d.updated_at < now() - interval '10 minutes'
ORDER BY d.updated_at;""")

LEDGER_FAILED = text("""\
SELECT id, kind, conversation_upload_id, last_error, failed_at
FROM conversation_upload_deliveries
WHERE state = 'failed'
ORDER BY failed_at DESC;""")

COMPLETION_WITHOUT_SYNC = text("""\
SELECT d.id, d.conversation_id
FROM conversation_upload_deliveries d
JOIN conversations c ON c.id = d.conversation_id
WHERE d.kind = 'sync_completion' AND d.state = 'completed'
  AND c.last_synced_at IS NULL;""")

NEW_COMPLETION_GOOD_JOBS = text("""\
SELECT COUNT(*)
FROM good_jobs
WHERE job_class = 'CompleteConversationSyncJob'
  AND queue_name = 'default'
  AND created_at > now() - interval '12 hours';""")


def pending_direct_with_file(session: Session, now: datetime) -> Check:
    rows = session.execute(PENDING_DIRECT_WITH_FILE).all()
    cutoff = (now - PENDING_DIRECT_LIMIT).astimezone(UTC).replace(tzinfo=None)
    stale = [row for row in rows if row.created_at < cutoff]
    return Check(
        not stale,
        f"pending direct uploads holding a file: {len(rows)},"
        f" older than 45 minutes: {len(stale)} (expected 0)",
        describe(rows),
    )


def direct_expired_after_deploy(session: Session, deployed_at: datetime) -> Check:
    naive_utc = deployed_at.astimezone(UTC).replace(tzinfo=None)
    count = int(
        session.execute(DIRECT_EXPIRED_AFTER_DEPLOY, {"deployed_at": naive_utc}).scalar_one()
    )
    return Check(
        count == 0,
        f"direct uploads expired after {naive_utc.isoformat()} UTC: {count} (expected 0)",
    )


def _no_rows(session: Session, statement: Any, what: str) -> Check:
    rows = session.execute(statement).all()
    return Check(not rows, f"{what}: {len(rows)} (expected 0)", describe(rows))


def ledger_in_flight(session: Session) -> Check:
    return _no_rows(session, LEDGER_IN_FLIGHT, "ledger rows in flight past the 10-minute grace")


def ledger_failed(session: Session) -> Check:
    return _no_rows(session, LEDGER_FAILED, "ledger rows failed, to triage by hand")


def completion_without_sync(session: Session) -> Check:
    return _no_rows(
        session, COMPLETION_WITHOUT_SYNC, "completions delivered whose sync never landed"
    )


def new_completion_good_jobs(
    session: Session, completion_enabled: Callable[[int], bool], now: datetime
) -> Check:
    """The seed's count, judged by attributing each row (:mod:`services.uploads.cutover`):
    only rows of XCALLY sources whose organization has the completion flag on, or rows no
    conversation can be attributed to, fail it."""
    count = int(session.execute(NEW_COMPLETION_GOOD_JOBS).scalar_one())
    attributed = cutover.xcally_completion_rows(session, completion_enabled, now)
    return Check(
        attributed.passed,
        f"CompleteConversationSyncJob GoodJob rows of the last 12 hours: {count};"
        f" {attributed.summary}",
        attributed.details,
    )


def _every_organization(_organization_id: int) -> bool:
    return True


def run_checks(
    session: Session,
    *,
    deployed_at: datetime,
    now: datetime | None = None,
    completion_enabled: Callable[[int], bool] = _every_organization,
) -> list[Check]:
    """Every check, in the seed's order, then the retired upload classes (read-only: the
    caller rolls back). ``completion_enabled`` answers whether an organization has
    ``api2_conversation_upload_sync_completion`` on (default: every one, the strictest)."""
    moment = now or datetime.now(UTC)
    return [
        pending_direct_with_file(session, moment),
        direct_expired_after_deploy(session, deployed_at),
        ledger_in_flight(session),
        ledger_failed(session),
        completion_without_sync(session),
        new_completion_good_jobs(session, completion_enabled, moment),
        cutover.retired_upload_good_jobs(session),
    ]
