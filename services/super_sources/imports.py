"""The import unit: walk one root node page by page, schedule each page's index jobs in
bulk, and persist where the walk stands after each page (the seed's ``progress``).

=================================  =========================================================
what happens                        what the next run does
=================================  =========================================================
a page's index jobs are enqueued,   resumes after that page (the checkpoint is written only
then its checkpoint is committed    after its jobs are on the queue)
killed between the two              walks that page again; its index job ids are the same,
                                    so a waiting one is not doubled and a finished one finds
                                    its node already indexed
a rate limit (before or during a    delayed to the reset / Retry-After; no attempt spent,
page)                               the checkpoint of the last page holds (and rides on the
                                    Delay, so a walk that progresses between rate limits
                                    never exhausts its delays)
the last page                       the import completes: the walk's ``watermark`` is kept,
                                    and the next import lists only what changed since it
the provider rejects the            the walk starts over as a complete one (from Graph's
watermark (``ResyncRequired``)      ``Location`` when given); the index jobs it schedules
                                    keep what still exists, and a node the provider says is
                                    gone is removed when its index job fetches it
``first_run``                       starts from the beginning with no watermark: everything
=================================  =========================================================
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from router.enqueue import Router
from services.connectors.nodes import NodeRef, ResyncRequired
from services.super_sources import store
from services.super_sources.context import SuperContext
from services.super_sources.families import index_request
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.errors import Delay
from tiers.options import CHECKPOINT

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ImportResult:
    pages: int
    scheduled: int
    complete: bool


def import_root(
    sessions: sessionmaker[Session],
    router: Router,
    ctx: SuperContext,
    *,
    organization_id: int,
    connection_id: int,
    root: NodeRef,
    first_run: bool,
) -> ImportResult:
    """Walk ``root`` to its end from where the last run stopped.

    Raises:
      RecordMissing: the connection is gone (or another organization's).
      Delay: the connection's quota is spent; its checkpoint holds.
      Unrecoverable / Retryable: from the connector.
    """
    with session_scope(sessions) as session:
        row = store.connection(session, organization_id, connection_id)
        conn = ctx.connection(row)
        entry = ctx.entry(row.source)
        state = store.locked_import(session, organization_id, connection_id, root)
        if first_run and state.started_at is not None and state.checkpoint is not None:
            log.info("import %s: first run requested; the walk starts over", root)
        if first_run or state.checkpoint is None:
            state.checkpoint = None
            state.since = None if first_run else state.watermark
            state.started_at = utcnow()
            state.completed_at = None
        checkpoint, since = state.checkpoint, state.since
        session.commit()

    pages = scheduled = 0
    while True:
        ctx.wait_for_quota(conn)
        try:
            page = entry.connector.walk(conn, root, checkpoint, since)
        except Delay as delay:
            raise _with_progress(delay, checkpoint) from None
        except ResyncRequired as resync:
            if since is None and checkpoint == resync.restart:
                raise  # already a complete walk from where the provider says to start
            log.warning("import %s: %s; a complete walk", root, resync)
            checkpoint, since = resync.restart, None
            with session_scope(sessions) as session:
                state = store.locked_import(session, organization_id, connection_id, root)
                state.checkpoint, state.since = checkpoint, None
                session.commit()
            continue
        requests = [
            index_request(
                organization_id, conn.source, connection_id, root, ref, page.dates.get(ref)
            )
            for ref in page.refs
        ]
        if requests:
            router.enqueue_many(requests)
        pages, scheduled = pages + 1, scheduled + len(requests)
        with session_scope(sessions) as session:
            state = store.locked_import(session, organization_id, connection_id, root)
            state.checkpoint = page.checkpoint
            state.pages += 1
            state.nodes_scheduled += len(requests)
            if page.checkpoint is None:
                state.completed_at = utcnow()
                state.watermark = page.watermark
                state.since = None
            session.commit()
        if page.checkpoint is None:
            return ImportResult(pages, scheduled, complete=True)
        checkpoint = page.checkpoint


def _with_progress(delay: Delay, checkpoint: str | None) -> Delay:
    """``delay`` carrying where the walk stands: a delay after new pages is progress, so the
    platform does not count it into the streak of delays that ends an attempt."""
    carry = {**delay.carry, CHECKPOINT: checkpoint or "start"}
    return Delay(delay.until, delay.reason, carry=carry, source=delay.source)
