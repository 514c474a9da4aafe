"""A document's indexed state written in one statement: its new version (when the content
changed), the versions past retention deleted, its previous chunk set deleted, the document
marked ready with its new hash, fingerprint and version, and the usage event recorded.

These writes belong together (the pipeline makes them under the document's lock, then
copies the new chunk set in, then commits), so they go to the server as one statement of
data-modifying CTEs: one round trip, one plan, no ORM flush, where they were five
statements (an ``INSERT``, a ``DELETE``, an ``UPDATE``, an ``INSERT ... RETURNING`` and,
from the tenth version on, another ``DELETE``). The CTEs touch different tables and read
nothing another one writes, so running them under one snapshot changes nothing.
The document's ORM instance is given the written values as its loaded state, so the
session neither flushes them again nor reads them back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, delete, insert, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from services.ingestion.store.usage import INGESTED_EVENT
from services.ingestion.store.versions import FIRST_VERSION, RETAINED_SNAPSHOTS
from shared.db.models.ingestion import KbChunk, KbDocument, KbDocumentVersion, UsageEvent
from shared.errors import RecordMissing

_DOCUMENTS = cast(Table, KbDocument.__table__)
_VERSIONS = cast(Table, KbDocumentVersion.__table__)
_CHUNKS = cast(Table, KbChunk.__table__)
_EVENTS = cast(Table, UsageEvent.__table__)


@dataclass(frozen=True)
class NewVersion:
    """The content a pass makes current, as its version row keeps it."""

    version: int
    content: str
    content_hash: str
    cause: str | None


def mark_indexed(
    session: Session,
    document: KbDocument,
    *,
    version: int,
    content_hash: str,
    index_fingerprint: str,
    new_version: NewVersion | None,
    payload: Mapping[str, object],
    now: datetime,
) -> None:
    """Write, in one statement of the caller's transaction, ``new_version`` (None: the
    content is the current version's), the deletion of versions past retention and of the
    document's chunk set, the document ``ready`` at ``version`` with ``content_hash`` and
    ``index_fingerprint`` (its attempt counted), and its ingestion usage event (``payload``
    after its base and version). The caller holds the document's lock, then writes the new
    chunk set and commits.

    Raises:
      RecordMissing: the document row is gone (it cannot be while the caller holds the
        lock and read it under it).
    """
    organization_id, document_id = document.organization_id, document.id
    ctes: list[Any] = [
        delete(_CHUNKS)
        .where(_CHUNKS.c.organization_id == organization_id, _CHUNKS.c.document_id == document_id)
        .cte("old_chunks")
    ]
    if new_version is not None:
        ctes.append(
            insert(_VERSIONS)
            .values(
                organization_id=organization_id,
                document_id=document_id,
                version=new_version.version,
                content=new_version.content,
                content_hash=new_version.content_hash,
                cause=new_version.cause,
                created_at=now,
            )
            .cte("new_version")
        )
        oldest_kept = new_version.version - RETAINED_SNAPSHOTS
        if oldest_kept > FIRST_VERSION:  # a first version has none older to drop
            ctes.append(
                delete(_VERSIONS)
                .where(
                    _VERSIONS.c.organization_id == organization_id,
                    _VERSIONS.c.document_id == document_id,
                    _VERSIONS.c.version < oldest_kept,
                )
                .cte("old_versions")
            )
    ctes.append(
        insert(_EVENTS)
        .values(
            organization_id=organization_id,
            kind=INGESTED_EVENT,
            subject_id=document_id,
            payload={
                "knowledge_base_id": document.knowledge_base_id,
                "version": version,
                **payload,
            },
            created_at=now,
        )
        .cte("event")
    )
    ready = {
        "status": "ready",
        "ready_at": now,
        "failure_reason": None,
        "failed_at": None,
        "updated_at": now,
        "content_hash": content_hash,
        "index_fingerprint": index_fingerprint,
        "current_version": version,
    }
    marked = (
        update(_DOCUMENTS)
        .where(_DOCUMENTS.c.organization_id == organization_id, _DOCUMENTS.c.id == document_id)
        .values(attempts=_DOCUMENTS.c.attempts + 1, **ready)
        .returning(_DOCUMENTS.c.attempts)
        .cte("marked")
    )
    attempts = session.execute(select(marked.c.attempts).add_cte(*ctes)).scalar_one_or_none()
    if attempts is None:
        raise RecordMissing(f"document {document_id} not found")
    for key, value in (ready | {"attempts": attempts}).items():
        set_committed_value(document, key, value)
