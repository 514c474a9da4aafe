"""The items a connector binding landed, and the documents they are.

A landed item is a ``file`` document of the binding's base (its bytes and media type as the
provider gave them, ``connector`` = the provider) put in ``processing`` with its submission
cause, for the ingestion job to index and version like an upload. Its name is the item's
title, made unique in the base when another live document has it (``title (item id)``),
and the item row maps the provider id to the document, so a renamed item stays the same
document and an upload of the same name is never replaced by a sync.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from services.ingestion.store.deletions import delete_document
from services.ingestion.store.documents import resubmit
from services.ingestion.store.locks import lock_document, lock_document_name
from services.ingestion.store.names import MAX_NAME_LENGTH
from shared.db.models.ingestion import KbDocument
from shared.db.models.kb_connectors import KbConnectorBinding, KbConnectorItem
from shared.errors import RecordMissing


@dataclass(frozen=True)
class KnownItem:
    """What the binding knows of an item: its document (None, or deleted, when it has to
    be landed again), the provider's modified time and the digest landed last."""

    external_id: str
    document_id: int | None
    document_live: bool
    modified_at: datetime | None
    content_digest: str | None
    listed_at: datetime | None = None

    def listed_this_pass(self, started: datetime) -> bool:
        return self.listed_at is not None and self.listed_at >= started


@dataclass(frozen=True)
class Landing:
    """An item's content as a document's source."""

    title: str
    data: bytes
    media_type: str
    url: str | None
    digest: str
    modified_at: datetime | None


def known_items(
    session: Session, organization_id: int, binding_id: int, external_ids: Iterable[str]
) -> dict[str, KnownItem]:
    """The binding's rows for ``external_ids`` (absent: never landed)."""
    ids = list(dict.fromkeys(external_ids))
    if not ids:
        return {}
    rows = session.execute(
        select(
            KbConnectorItem.external_id,
            KbConnectorItem.document_id,
            KbDocument.deleted_at.is_(None) & KbDocument.id.is_not(None),
            KbConnectorItem.modified_at,
            KbConnectorItem.content_digest,
            KbConnectorItem.listed_at,
        )
        .outerjoin(
            KbDocument,
            (KbDocument.organization_id == KbConnectorItem.organization_id)
            & (KbDocument.id == KbConnectorItem.document_id),
        )
        .where(
            KbConnectorItem.organization_id == organization_id,
            KbConnectorItem.binding_id == binding_id,
            KbConnectorItem.external_id.in_(ids),
        )
    )
    return {row[0]: KnownItem(row[0], row[1], bool(row[2]), row[3], row[4], row[5]) for row in rows}


def mark_listed(
    session: Session,
    organization_id: int,
    binding_id: int,
    external_ids: Sequence[str],
    now: datetime,
) -> None:
    """Record that this pass listed these (already landed) items."""
    if external_ids:
        session.execute(
            update(KbConnectorItem)
            .where(
                KbConnectorItem.organization_id == organization_id,
                KbConnectorItem.binding_id == binding_id,
                KbConnectorItem.external_id.in_(list(external_ids)),
            )
            .values(listed_at=now),
            execution_options={"synchronize_session": False},
        )


def save_item(
    session: Session,
    *,
    binding: KbConnectorBinding,
    external_id: str,
    document_id: int,
    modified_at: datetime | None,
    digest: str,
    now: datetime,
) -> None:
    """Insert or update the item row after a landing."""
    values = {
        "document_id": document_id,
        "modified_at": modified_at,
        "content_digest": digest,
        "listed_at": now,
        "updated_at": now,
    }
    session.execute(
        insert(KbConnectorItem)
        .values(
            binding_id=binding.id,
            external_id=external_id,
            organization_id=binding.organization_id,
            created_at=now,
            **values,
        )
        .on_conflict_do_update(index_elements=["binding_id", "external_id"], set_=values)
    )


def touch_item(
    session: Session,
    organization_id: int,
    binding_id: int,
    external_id: str,
    modified_at: datetime | None,
    now: datetime,
) -> None:
    """An item listed again with the same content: newer modified time, listed now."""
    session.execute(
        update(KbConnectorItem)
        .where(
            KbConnectorItem.organization_id == organization_id,
            KbConnectorItem.binding_id == binding_id,
            KbConnectorItem.external_id == external_id,
        )
        .values(modified_at=modified_at, listed_at=now, updated_at=now),
        execution_options={"synchronize_session": False},
    )


def unlisted_items(
    session: Session, organization_id: int, binding_id: int, before: datetime, limit: int
) -> list[str]:
    """Items no pass listed since ``before`` (the pass's start), ``limit`` at a time."""
    return list(
        session.scalars(
            select(KbConnectorItem.external_id)
            .where(
                KbConnectorItem.organization_id == organization_id,
                KbConnectorItem.binding_id == binding_id,
                (KbConnectorItem.listed_at < before) | KbConnectorItem.listed_at.is_(None),
            )
            .order_by(KbConnectorItem.external_id)
            .limit(limit)
        )
    )


def remove_items(
    session: Session,
    organization_id: int,
    binding_id: int,
    external_ids: Sequence[str],
    now: datetime,
) -> int:
    """The items are gone at the provider: delete their documents (chunks out of search at
    once) and their rows; returns the documents deleted."""
    if not external_ids:
        return 0
    known = known_items(session, organization_id, binding_id, external_ids)
    removed = 0
    for item in known.values():
        if item.document_id is not None and item.document_live:
            try:
                delete_document(
                    session,
                    organization_id=organization_id,
                    document_id=item.document_id,
                    now=now,
                )
                removed += 1
            except RecordMissing:
                pass
    session.execute(
        delete(KbConnectorItem).where(
            KbConnectorItem.organization_id == organization_id,
            KbConnectorItem.binding_id == binding_id,
            KbConnectorItem.external_id.in_(list(external_ids)),
        ),
        execution_options={"synchronize_session": False},
    )
    return removed


def land_document(
    session: Session,
    *,
    binding: KbConnectorBinding,
    document_id: int | None,
    external_id: str,
    landing: Landing,
    cause: str,
    now: datetime,
) -> KbDocument:
    """Make ``landing`` the source of the item's document (the live one ``document_id``
    names, else a new one), in ``processing`` with ``cause``; the caller enqueues its
    ingestion after the commit."""
    document = _live(session, binding.organization_id, document_id)
    if document is None:
        name = _free_name(session, binding, landing.title, external_id, None)
        document = KbDocument(
            organization_id=binding.organization_id,
            knowledge_base_id=binding.knowledge_base_id,
            name=name,
            kind="file",
            created_at=now,
        )
        session.add(document)
    else:
        lock_document(session, document.organization_id, document.id)
        session.refresh(document)
        if document.name != _clip(landing.title):
            document.name = _free_name(session, binding, landing.title, external_id, document.id)
    document.kind = "file"
    document.source_bytes = landing.data
    document.content_type = landing.media_type
    document.filename = None
    document.url = landing.url
    document.crawl_depth = 0
    document.connector = binding.provider
    document.audience = list(binding.audience)
    document.last_fetched_at = now
    document.submission_cause = cause
    resubmit(document, now)
    session.flush()
    return document


def _live(session: Session, organization_id: int, document_id: int | None) -> KbDocument | None:
    if document_id is None:
        return None
    return session.execute(
        select(KbDocument).where(
            KbDocument.organization_id == organization_id,
            KbDocument.id == document_id,
            KbDocument.deleted_at.is_(None),
        )
    ).scalar_one_or_none()


def _clip(title: str) -> str:
    cleaned = " ".join(title.split()) or "Untitled"
    return cleaned[:MAX_NAME_LENGTH]


def _free_name(
    session: Session,
    binding: KbConnectorBinding,
    title: str,
    external_id: str,
    own_id: int | None,
) -> str:
    """The item's title when no other live document of the base has it, else the title
    with the item id, else the provider and item id."""
    base = _clip(title)
    suffix = f" ({external_id})"
    candidates = [
        base,
        base[: MAX_NAME_LENGTH - len(suffix)] + suffix,
        f"{binding.provider}:{binding.id}:{external_id}"[:MAX_NAME_LENGTH],
    ]
    for name in candidates:
        lock_document_name(session, binding.organization_id, binding.knowledge_base_id, name)
        taken = session.scalar(
            select(func.count()).where(
                KbDocument.organization_id == binding.organization_id,
                KbDocument.knowledge_base_id == binding.knowledge_base_id,
                KbDocument.name == name,
                KbDocument.deleted_at.is_(None),
                KbDocument.id != (own_id or 0),
            )
        )
        if not taken:
            return name
    return candidates[-1]
