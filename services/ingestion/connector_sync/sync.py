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
a partial page (``complete`` False)       nothing is removed by absence this pass
=======================================  ==================================================

A pass that completes sets the binding's freshness clock (``next_sync_at``: its base's
refresh schedule, else the platform's recrawl interval); a failed sync backs it off
exponentially (``connector_job``).
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from router.enqueue import Router
from router.unit_of_work import UnitOfWork, unit_of_work
from services.connectors.nodes import RateLimitState
from services.ingestion import store
from services.ingestion.connector_sync.adapters import (
    HTML,
    ConnectorAccess,
    FetchedItem,
    KbConnector,
    ListedItem,
)
from services.ingestion.credentials import CredentialBox
from services.ingestion.families import ingest_request
from services.ingestion.url_sources import next_refresh_time, refresh_interval_seconds
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.db.models.kb_connectors import KbConnection, KbConnectorBinding
from shared.errors import Delay, RecordMissing, Unrecoverable
from tiers.options import CHECKPOINT

log = logging.getLogger(__name__)

#: The checkpoint of a pass whose listing is done and whose removals remain.
FINISHING = "@finish"
#: Landed documents per committed batch.
BATCH = 50
#: Items asked about per ``confirm_gone`` call (Notion: one request each).
CONFIRM_BATCH = 20
#: A pass resumed after this long starts over.
MAX_PASS_AGE = timedelta(days=1)
#: Jobs waiting for one quota reset start within this many seconds after it.
QUOTA_JITTER_SECONDS = 1.0


@dataclass(frozen=True)
class SyncContext:
    """What a sync needs besides a session: the credentials box, the connectors, where
    their APIs answer (configuration overrides), the quota store and the intervals."""

    box: CredentialBox
    connectors: Mapping[str, KbConnector]
    provider_urls: Mapping[str, str] = field(default_factory=dict)
    rate_limits: RateLimitState | None = None
    timeout: float = 30.0
    recrawl_interval_seconds: float = 86_400.0

    def connector(self, provider: str) -> KbConnector:
        found = self.connectors.get(provider)
        if found is None:
            raise Unrecoverable(f"no connector for provider {provider!r}")
        return found

    def access(
        self, binding: KbConnectorBinding, connection: KbConnection, sealed: bytes
    ) -> ConnectorAccess:
        """The binding's way to its provider (the credentials opened here)."""
        connector = self.connector(binding.provider)
        settings = dict(connection.settings or {})
        return ConnectorAccess(
            provider=binding.provider,
            organization_id=binding.organization_id,
            connection_id=binding.connection_id,
            binding_id=binding.id,
            base_url=self.provider_urls.get(binding.provider)
            or connector.default_base_url(settings),
            credentials=self.box.open(sealed),
            connection_settings=settings,
            settings=dict(binding.settings or {}),
            timeout=self.timeout,
            rate_limits=self.rate_limits,
        )

    def interval(self, refresh_schedule: str | None) -> float:
        return refresh_interval_seconds(refresh_schedule, self.recrawl_interval_seconds)


@dataclass
class SyncOutcome:
    """What one delivery of a sync did (``finished``: the pass completed)."""

    pages: int = 0
    listed: int = 0
    landed: int = 0
    unchanged: int = 0
    removed: int = 0
    finished: bool = False
    document_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _Run:
    """One delivery's view of the binding."""

    organization_id: int
    binding_id: int
    knowledge_base_id: int
    connector: KbConnector
    access: ConnectorAccess
    interval: float
    mode: str
    started: datetime
    checkpoint: str | None
    since: str | None
    item_id: str | None
    document_id: int | None


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
    run = _open(sessions, ctx, organization_id, binding_id, full, now)
    if run.item_id is not None:
        return _sync_item(sessions, router, run, "refresh" if scheduled else "connector")
    outcome = SyncOutcome()
    checkpoint = run.checkpoint
    while checkpoint != FINISHING:
        try:
            _wait_for_quota(run)
            page = run.connector.list_page(run.access, checkpoint, run.since)
        except Delay as delay:
            raise _with_progress(delay, run, checkpoint, 0) from None
        _apply(sessions, router, run, page.items, checkpoint, outcome)
        following = page.checkpoint if page.checkpoint is not None else FINISHING
        with session_scope(sessions) as session:
            binding = _binding(session, run)
            binding.checkpoint = following
            binding.pass_complete = binding.pass_complete and page.complete
            if page.checkpoint is None and run.connector.incremental and page.watermark:
                binding.watermark = page.watermark
            session.commit()
        outcome.pages += 1
        checkpoint = following
    _remove_unlisted(sessions, run, outcome)
    with session_scope(sessions) as session:
        _succeeded(_binding(session, run), run, utcnow())
        session.commit()
    outcome.finished = True
    log.info("connector sync of binding %s (%s) done: %s", binding_id, run.mode, outcome)
    return outcome


def _open(
    sessions: sessionmaker[Session],
    ctx: SyncContext,
    organization_id: int,
    binding_id: int,
    full: bool,
    now: datetime,
) -> _Run:
    """Read the binding, open its credentials and start a pass when none is under way."""
    with session_scope(sessions) as session:
        binding = store.get_binding(
            session, organization_id=organization_id, binding_id=binding_id, for_update=True
        )
        base = store.get_knowledge_base(
            session, organization_id=organization_id, knowledge_base_id=binding.knowledge_base_id
        )
        connection = store.get_connection(
            session, organization_id=organization_id, connection_id=binding.connection_id
        )
        sealed = store.sealed_credentials(
            session, organization_id=organization_id, connection_id=binding.connection_id
        )
        connector = ctx.connector(binding.provider)
        access = ctx.access(binding, connection, sealed)
        stale = binding.pass_started_at is not None and binding.pass_started_at < now - MAX_PASS_AGE
        if binding.item_id is None and (
            binding.pass_started_at is None or stale or (full and binding.pass_mode != "full")
        ):
            incremental = connector.incremental and binding.watermark and not full
            binding.pass_mode = "incremental" if incremental else "full"
            binding.pass_started_at = now
            binding.pass_complete = True
            binding.checkpoint = None
        run = _Run(
            organization_id=organization_id,
            binding_id=binding_id,
            knowledge_base_id=binding.knowledge_base_id,
            connector=connector,
            access=access,
            interval=ctx.interval(base.refresh_schedule),
            mode=binding.pass_mode or "full",
            started=binding.pass_started_at or now,
            checkpoint=binding.checkpoint,
            since=binding.watermark if binding.pass_mode == "incremental" else None,
            item_id=binding.item_id,
            document_id=binding.document_id,
        )
        session.commit()
    return run


def _binding(session: Session, run: _Run) -> KbConnectorBinding:
    return store.get_binding(
        session, organization_id=run.organization_id, binding_id=run.binding_id, for_update=True
    )


def _wait_for_quota(run: _Run) -> None:
    """Before a provider call: delay to the reset when the connection's quota is spent
    (pacing: no call was made, so it does not count toward the family's delay limit)."""
    until = run.connector.blocked_until(run.access)
    if until is not None and until > datetime.now(UTC):
        again = until.timestamp() + random.uniform(0.0, QUOTA_JITTER_SECONDS)
        raise Delay(again, reason="rate-limit", source="pacing")


def _with_progress(delay: Delay, run: _Run, checkpoint: str | None, handled: int) -> Delay:
    """``delay`` carrying where the pass stands: a new value after progress, so the
    platform does not count the delay into the streak that ends an attempt."""
    mark = f"{run.binding_id}:{checkpoint or 'start'}:{handled}"
    return Delay(
        delay.until, delay.reason, carry={**delay.carry, CHECKPOINT: mark}, source=delay.source
    )


def landing_of(item: FetchedItem, modified_at: datetime | None) -> store.Landing:
    """An item's content as a document's source bytes (titled, for text and markdown)."""
    body = item.body
    if item.media_type != HTML and item.title and not body.lstrip().startswith("#"):
        body = f"# {item.title}\n\n{body}"
    data = body.encode()
    digest = hashlib.sha256()
    for part in (item.title, item.media_type, item.url or ""):
        digest.update(part.encode() + b"\x00")
    digest.update(data)
    return store.Landing(
        title=item.title,
        data=data,
        media_type=item.media_type,
        url=item.url,
        digest=digest.hexdigest(),
        modified_at=modified_at or item.modified_at,
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
    run: _Run,
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
                    _wait_for_quota(run)
                    content = run.connector.fetch(run.access, item.external_id)
                except Delay as delay:
                    _commit(uow, run, unchanged)
                    raise _with_progress(delay, run, checkpoint, handled) from None
            now = utcnow()
            if content is None:
                outcome.removed += store.remove_items(
                    uow.session, org, binding_id, [item.external_id], now
                )
                known.pop(item.external_id, None)
            else:
                landed = _land(uow, run, binding, item, content, current, "connector", now)
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


def _commit(uow: UnitOfWork, run: _Run, unchanged: list[str]) -> None:
    store.mark_listed(uow.session, run.organization_id, run.binding_id, unchanged, utcnow())
    unchanged.clear()
    uow.commit()


def _land(
    uow: UnitOfWork,
    run: _Run,
    binding: KbConnectorBinding,
    item: ListedItem,
    content: FetchedItem,
    current: store.KnownItem | None,
    cause: str,
    now: datetime,
) -> store.KnownItem | None:
    """Land ``content`` unless its digest is the one landed last (then only the item's
    modified time and listing are recorded); returns the item as known now, or None."""
    landing = landing_of(content, item.modified_at)
    session = uow.session
    if current is not None and current.document_live and current.content_digest == landing.digest:
        store.touch_item(
            session,
            run.organization_id,
            run.binding_id,
            item.external_id,
            landing.modified_at,
            now,
        )
        return None
    document = store.land_document(
        session,
        binding=binding,
        document_id=current.document_id if current is not None else None,
        external_id=item.external_id,
        landing=landing,
        cause=cause,
        now=now,
    )
    store.save_item(
        session,
        binding=binding,
        external_id=item.external_id,
        document_id=document.id,
        modified_at=landing.modified_at,
        digest=landing.digest,
        now=now,
    )
    uow.enqueue(ingest_request(run.organization_id, document.id, run.knowledge_base_id))
    return store.KnownItem(
        item.external_id, document.id, True, landing.modified_at, landing.digest, now
    )


def _remove_unlisted(sessions: sessionmaker[Session], run: _Run, outcome: SyncOutcome) -> None:
    """The end of the listing: remove what the pass proved gone (see the module table)."""
    with session_scope(sessions) as session:
        complete = _binding(session, run).pass_complete
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
                _wait_for_quota(run)
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


def _succeeded(binding: KbConnectorBinding, run: _Run, now: datetime) -> None:
    binding.checkpoint = None
    binding.pass_mode = None
    binding.pass_started_at = None
    binding.pass_complete = True
    binding.last_synced_at = now
    binding.last_error = None
    binding.sync_failures = 0
    binding.next_sync_at = next_refresh_time(now, run.interval, 0)
    binding.updated_at = now


def _sync_item(
    sessions: sessionmaker[Session], router: Router, run: _Run, cause: str
) -> SyncOutcome:
    """A single-item binding: fetch the item and land it in its document (created on the
    first sync), or delete the document when the provider proves the item gone."""
    assert run.item_id is not None
    _wait_for_quota(run)
    content = run.connector.fetch(run.access, run.item_id)
    outcome = SyncOutcome(listed=1, finished=True)
    with unit_of_work(sessions, router) as uow:
        session, now = uow.session, utcnow()
        binding = _binding(session, run)
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
            _succeeded(binding, run, now)
            binding.last_error = "the item is gone at the provider; its document was deleted"
        else:
            listed = ListedItem(run.item_id, content.modified_at)
            landed = _land(uow, run, binding, listed, content, current, cause, now)
            if landed is not None:
                binding.document_id = landed.document_id
                outcome.landed, outcome.document_ids = 1, [landed.document_id or 0]
            else:
                outcome.unchanged = 1
            _succeeded(binding, run, now)
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
    run: _Run,
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
