"""A single-item binding's sync: fetch the one item and land it in its document (created on
the first sync), or delete the document when the provider proves the item gone. Its
freshness clock is mirrored on the document (the staleness badge reads it)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from router.enqueue import Router
from router.unit_of_work import unit_of_work
from services.ingestion import store
from services.ingestion.connector_sync.adapters import ListedItem
from services.ingestion.connector_sync.landing import land_item
from services.ingestion.connector_sync.run import (
    Run,
    SyncOutcome,
    locked_binding,
    record_success,
    wait_for_quota,
)
from shared.db.base import utcnow
from shared.errors import RecordMissing


def sync_item(sessions: sessionmaker[Session], router: Router, run: Run, cause: str) -> SyncOutcome:
    """A single-item binding: fetch the item and land it in its document (created on the
    first sync), or delete the document when the provider proves the item gone."""
    assert run.item_id is not None
    wait_for_quota(run)
    content = run.connector.fetch(run.access, run.item_id)
    outcome = SyncOutcome(listed=1, finished=True)
    with unit_of_work(sessions, router) as uow:
        session, now = uow.session, utcnow()
        binding = locked_binding(session, run)
        known = store.known_items(session, run.organization_id, run.binding_id, [run.item_id])
        current = known.get(run.item_id)
        if current is None and binding.document_id is not None:
            current = store.KnownItem(run.item_id, binding.document_id, True, None, None, None)
        if content is None:
            outcome.removed = store.remove_items(
                session, run.organization_id, run.binding_id, [run.item_id], now
            )
            if binding.document_id is not None and outcome.removed == 0:
                outcome.removed = _delete_quietly(session, run.organization_id, binding.document_id)
            record_success(binding, run, now)
            binding.last_error = "the item is gone at the provider; its document was deleted"
        else:
            listed = ListedItem(run.item_id, content.modified_at)
            landed = land_item(uow, run, binding, listed, content, current, cause, now)
            if landed is not None:
                binding.document_id = landed.document_id
                outcome.landed, outcome.document_ids = 1, [landed.document_id or 0]
            else:
                outcome.unchanged = 1
            record_success(binding, run, now)
            _document_clock(session, run, binding.document_id, now, 0, binding.next_sync_at)
        uow.commit()
    return outcome


def _delete_quietly(session: Session, organization_id: int, document_id: int) -> int:
    try:
        store.delete_document(session, organization_id=organization_id, document_id=document_id)
    except RecordMissing:
        return 0
    return 1


def _document_clock(
    session: Session,
    run: Run,
    document_id: int | None,
    now: datetime,
    failures: int,
    next_at: datetime | None,
) -> None:
    """Mirror a single item's freshness clock on its document (the staleness badge)."""
    if document_id is None:
        return
    try:
        document = store.get_document(
            session, organization_id=run.organization_id, document_id=document_id
        )
    except RecordMissing:
        return
    document.last_fetched_at = now
    document.refresh_failures = failures
    document.next_refresh_at = next_at
