"""One connector sync of one binding: list the provider's items page by page, land the new
and changed ones as documents for the ingestion machine, remove what is proven gone.

=======================================  ==================================================
what happens                              what the next delivery does
=======================================  ==================================================
a pass starts                             ``full`` (first sync, ``full`` asked, or no change
                                          feed) or ``incremental`` (from the last pass's
                                          watermark: Drive's changes, Graph's delta)
an item listed with a modified time not   nothing is fetched (``unchanged``)
newer than the one landed
an item fetched (or carried by the        landed: its document's source replaced and put
listing) whose content changed            in ``processing`` (cause ``connector``; a single
                                          item's scheduled re-fetch: ``refresh``); its
                                          ingestion job is enqueued after the commit
an item whose ``fetch`` answers None      its document deleted: the provider proved it
(404, trashed, deleted, archived)         gone
a page is done                            its checkpoint is committed; a kill resumes there
``Delay`` (429/403 + Retry-After, a       the items handled so far are committed; the delay
recorded quota)                           carries the progress (``st_ckpt``), so a pass that
                                          advances between rate limits never exhausts its
                                          delays; the page is listed again and its handled
                                          items are skipped
the last page of a **full** pass whose    items it did not list are removed (``removal =
every page was complete                   "listing"``); with ``removal = "proof"`` (Notion)
                                          each is removed only if ``confirm_gone`` says so
the provider rejects the change token     the pass becomes a full one from its first page
of an incremental pass (Drive 400/404/    (``ResyncRequired``): the token is dropped, every
410, Graph 410 ``resyncRequired``)        item is listed again, and what the full listing
                                          no longer has is removed
a partial page (``complete`` False)       nothing is removed by absence this pass
one item's fetch refused                  the item is kept as it was and the pass goes
(``Unrecoverable``: a 403 on that file,   on; the binding's ``last_error`` names it
an export over the provider's limit)
another failure (5xx, timeout,            the items landed so far are committed; the job
truncated)                                retries from the page's checkpoint
=======================================  ==================================================

A pass that completes sets the binding's freshness clock (``next_sync_at``: its base's
refresh schedule, else the platform's recrawl interval); a failed sync backs it off
exponentially (:mod:`.job`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from router.enqueue import Router
from router.unit_of_work import UnitOfWork, unit_of_work
from services.connectors.nodes import ResyncRequired
from services.ingestion import store
from services.ingestion.connector_sync.adapters import ListedItem
from services.ingestion.connector_sync.landing import land_item
from services.ingestion.connector_sync.run import (
    Run,
    SyncContext,
    SyncOutcome,
    locked_binding,
    open_run,
    record_success,
    restart_as_full,
    wait_for_quota,
)
from services.ingestion.connector_sync.single_item import sync_item
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.errors import Delay, Unrecoverable
from tiers.options import CHECKPOINT

log = logging.getLogger(__name__)

#: The checkpoint of a pass whose listing is done and whose removals remain.
FINISHING = "@finish"
#: Landed documents per committed batch.
BATCH = 50
#: Items asked about per ``confirm_gone`` call (Notion: one request each).
CONFIRM_BATCH = 20


def sync_binding(
    sessions: sessionmaker[Session],
    router: Router,
    ctx: SyncContext,
    *,
    organization_id: int,
    binding_id: int,
    full: bool = False,
    scheduled: bool = False,
    now: datetime | None = None,
) -> SyncOutcome:
    """Run (or resume) the binding's pass to its end.

    Raises:
      RecordMissing: the binding, its base or its connection is gone (or another tenant's).
      Delay: the provider asked to wait; the progress so far is committed.
      Unrecoverable / Retryable: from the provider (401, bad settings; 5xx, truncated).
    """
    now = now or utcnow()
    run = open_run(sessions, ctx, organization_id, binding_id, full, now)
    if run.item_id is not None:
        return sync_item(sessions, router, run, "refresh" if scheduled else "connector")
    outcome = SyncOutcome()
    checkpoint = run.checkpoint
    while checkpoint != FINISHING:
        try:
            wait_for_quota(run)
            page = run.connector.list_page(run.access, checkpoint, run.since)
        except Delay as delay:
            raise _with_progress(delay, run, checkpoint, 0) from None
        except ResyncRequired as resync:
            if run.mode == "full":
                raise
            log.warning("connector sync of binding %s: %s; a full pass", binding_id, resync)
            run = restart_as_full(sessions, run, resync.restart)
            checkpoint = run.checkpoint
            continue
        _apply(sessions, router, run, page.items, checkpoint, outcome)
        following = page.checkpoint if page.checkpoint is not None else FINISHING
        with session_scope(sessions) as session:
            binding = locked_binding(session, run)
            binding.checkpoint = following
            binding.pass_complete = binding.pass_complete and page.complete
            if page.checkpoint is None and run.connector.incremental and page.watermark:
                binding.watermark = page.watermark
            session.commit()
        outcome.pages += 1
        checkpoint = following
    _remove_unlisted(sessions, run, outcome)
    with session_scope(sessions) as session:
        binding = locked_binding(session, run)
        record_success(binding, run, utcnow())
        if outcome.unreadable:
            count, first = len(outcome.unreadable), outcome.unreadable[0]
            binding.last_error = f"{count} item(s) could not be read, e.g. {first}"[:300]
        session.commit()
    outcome.finished = True
    log.info("connector sync of binding %s (%s) done: %s", binding_id, run.mode, outcome)
    return outcome


def _with_progress(delay: Delay, run: Run, checkpoint: str | None, handled: int) -> Delay:
    """``delay`` carrying where the pass stands: a new value after progress, so the
    platform does not count the delay into the streak that ends an attempt."""
    mark = f"{run.binding_id}:{checkpoint or 'start'}:{handled}"
    return Delay(
        delay.until, delay.reason, carry={**delay.carry, CHECKPOINT: mark}, source=delay.source
    )


def _unchanged_by_date(item: ListedItem, known: store.KnownItem | None) -> bool:
    return (
        known is not None
        and known.document_live
        and item.modified_at is not None
        and known.modified_at is not None
        and item.modified_at <= known.modified_at
    )


def _apply(
    sessions: sessionmaker[Session],
    router: Router,
    run: Run,
    items: Sequence[ListedItem],
    checkpoint: str | None,
    outcome: SyncOutcome,
) -> None:
    """Land a page's new and changed items, remove those proven gone, in batches."""
    org, binding_id = run.organization_id, run.binding_id
    outcome.listed += len(items)
    with unit_of_work(sessions, router) as uow:
        known = store.known_items(uow.session, org, binding_id, [i.external_id for i in items])
        binding = store.get_binding(uow.session, organization_id=org, binding_id=binding_id)
        handled = pending = 0
        unchanged: list[str] = []
        for item in items:
            current = known.get(item.external_id)
            if item.stands_in and current is not None and current.listed_this_pass(run.started):
                handled += 1
                continue
            if _unchanged_by_date(item, current):
                unchanged.append(item.external_id)
                handled += 1
                continue
            content = item.content
            if content is None:
                try:
                    wait_for_quota(run)
                    content = run.connector.fetch(run.access, item.external_id)
                except Delay as delay:
                    _commit(uow, run, unchanged)
                    raise _with_progress(delay, run, checkpoint, handled) from None
                except Unrecoverable as refused:
                    # One item the provider will not give (its permissions, an export over
                    # the provider's limit) must not stop the pass: it is kept as it was.
                    log.warning(
                        "binding %s: item %s unreadable: %s", binding_id, item.external_id, refused
                    )
                    outcome.unreadable.append(f"{item.external_id}: {refused}")
                    unchanged.append(item.external_id)
                    handled += 1
                    continue
                except Exception:
                    _commit(uow, run, unchanged)  # the items landed so far stay landed
                    raise
            now = utcnow()
            if content is None:
                outcome.removed += store.remove_items(
                    uow.session, org, binding_id, [item.external_id], now
                )
                known.pop(item.external_id, None)
            else:
                landed = land_item(uow, run, binding, item, content, current, "connector", now)
                if landed is None:
                    outcome.unchanged += 1
                else:
                    outcome.landed += 1
                    outcome.document_ids.append(landed.document_id or 0)
                    known[item.external_id] = landed
                    pending += 1
            handled += 1
            if pending >= BATCH:
                _commit(uow, run, unchanged)
                pending = 0
        outcome.unchanged += len(unchanged)
        _commit(uow, run, unchanged)


def _commit(uow: UnitOfWork, run: Run, unchanged: list[str]) -> None:
    store.mark_listed(uow.session, run.organization_id, run.binding_id, unchanged, utcnow())
    unchanged.clear()
    uow.commit()


def _remove_unlisted(sessions: sessionmaker[Session], run: Run, outcome: SyncOutcome) -> None:
    """The end of the listing: remove what the pass proved gone (see the module table)."""
    with session_scope(sessions) as session:
        complete = locked_binding(session, run).pass_complete
    removal = run.connector.removal
    if removal == "listing" and not (run.mode == "full" and complete):
        return
    org, binding_id = run.organization_id, run.binding_id
    handled = 0
    while True:
        with session_scope(sessions) as session:
            batch = CONFIRM_BATCH if removal == "proof" else 500
            missing = store.unlisted_items(session, org, binding_id, run.started, batch)
        if not missing:
            return
        gone: frozenset[str] = frozenset(missing)
        if removal == "proof":
            try:
                wait_for_quota(run)
                gone = run.connector.confirm_gone(run.access, missing)
            except Delay as delay:
                raise _with_progress(delay, run, FINISHING, handled) from None
        with session_scope(sessions) as session:
            now = utcnow()
            outcome.removed += store.remove_items(session, org, binding_id, sorted(gone), now)
            kept = [i for i in missing if i not in gone]
            store.mark_listed(session, org, binding_id, kept, now)
            session.commit()
        handled += len(missing)


__all__ = ["FINISHING", "SyncContext", "SyncOutcome", "sync_binding"]
