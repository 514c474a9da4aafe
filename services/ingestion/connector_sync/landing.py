"""An item's content landed as its document: the source bytes (titled), the digest that
says whether it changed, and the write that puts the document in ``processing`` for the
ingestion job (enqueued after the commit)."""

from __future__ import annotations

import hashlib
from datetime import datetime

from router.unit_of_work import UnitOfWork
from services.ingestion import store
from services.ingestion.connector_sync.adapters import HTML, FetchedItem, ListedItem
from services.ingestion.connector_sync.run import Run
from services.ingestion.families import ingest_request
from shared.db.models.kb_connectors import KbConnectorBinding


def landing_of(item: FetchedItem, modified_at: datetime | None) -> store.Landing:
    """An item's content as a document's source bytes (titled, for text and markdown)."""
    body = item.body
    if item.media_type != HTML and item.title and not body.lstrip().startswith(f"# {item.title}"):
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


def land_item(
    uow: UnitOfWork,
    run: Run,
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
