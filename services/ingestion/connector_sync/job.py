"""The connector sync job's body: the sync, and after a sync that failed for good, the
binding's freshness clock backed off.

A failure that no retry will follow (an ``Unrecoverable`` such as a 401 or bad settings,
the family's last attempt, or a provider that kept answering 429 past the delay limit) is
recorded on the binding: ``sync_failures`` grows, ``last_error`` says why (never the
credentials), and the next scheduled sync waits ``interval * 2**failures`` (capped at a
week), as a failing URL refresh does. A single item's document shows the same clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from router.enqueue import Router
from services.ingestion import store
from services.ingestion.connector_sync.sync import SyncContext, SyncOutcome, sync_binding
from services.ingestion.url_sources import next_refresh_time
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.errors import Delay, DelaysExhausted, RecordMissing, SpeedtierError, Unrecoverable

log = logging.getLogger(__name__)

REASON_LENGTH = 300


def failure_reason(error: BaseException) -> str:
    """A short reason for ``last_error`` (provider statuses and paths, no credentials)."""
    if isinstance(error, SpeedtierError):
        return f"{type(error).__name__}: {error}"[:REASON_LENGTH]
    return f"internal error ({type(error).__name__})"


def record_sync_failure(
    session: Session,
    ctx: SyncContext,
    *,
    organization_id: int,
    binding_id: int,
    error: BaseException,
) -> None:
    """Back the binding's clock off after a failed sync (the caller commits)."""
    try:
        binding = store.get_binding(
            session, organization_id=organization_id, binding_id=binding_id, for_update=True
        )
        base = store.get_knowledge_base(
            session, organization_id=organization_id, knowledge_base_id=binding.knowledge_base_id
        )
    except RecordMissing:
        return
    now = utcnow()
    binding.sync_failures += 1
    binding.last_error = failure_reason(error)
    binding.next_sync_at = next_refresh_time(
        now, ctx.interval(base.refresh_schedule), binding.sync_failures
    )
    binding.updated_at = now
    if binding.item_id is not None and binding.document_id is not None:
        try:
            document = store.get_document(
                session, organization_id=organization_id, document_id=binding.document_id
            )
        except RecordMissing:
            document = None
        if document is not None:
            document.last_fetched_at = now
            document.refresh_failures = binding.sync_failures
            document.next_refresh_at = binding.next_sync_at
    log.warning(
        "connector sync of binding %s failed (%s failures): %s",
        binding_id,
        binding.sync_failures,
        binding.last_error,
    )


def run_sync(
    sessions: sessionmaker[Session],
    router: Router,
    ctx: SyncContext,
    *,
    organization_id: int,
    binding_id: int,
    full: bool = False,
    scheduled: bool = False,
    final_attempt: bool = True,
    delay_ends_job: Callable[[Delay], bool] = lambda _delay: False,
) -> SyncOutcome:
    """:func:`sync_binding`, recording a failure no retry will follow.

    Raises:
      RecordMissing: the binding, its base or its connection is gone.
      Delay: re-delivered later (progress committed); recorded first when it ends the job.
      any other error, after recording it when it is final.
    """

    def record(error: BaseException) -> None:
        with session_scope(sessions) as session:
            record_sync_failure(
                session, ctx, organization_id=organization_id, binding_id=binding_id, error=error
            )
            session.commit()

    try:
        return sync_binding(
            sessions,
            router,
            ctx,
            organization_id=organization_id,
            binding_id=binding_id,
            full=full,
            scheduled=scheduled,
        )
    except RecordMissing:
        raise
    except Delay as delay:
        if delay_ends_job(delay):
            record(DelaysExhausted(f"the provider kept asking to wait ({delay.reason})"))
        raise
    except Exception as exc:
        if final_attempt or isinstance(exc, Unrecoverable):
            record(exc)
        raise
