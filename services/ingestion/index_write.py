"""Writing an ingestion pass's new index: the document's version, ``ready`` state and usage
event in one statement, then its chunks in one ``COPY``
(:mod:`services.ingestion.pipeline` calls it under the document's lock)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from services.indexing.chunk_batches import PackedVector
from services.indexing.chunking import Chunk
from services.indexing.kb_chunks import copy_kb_chunks
from services.ingestion import store
from shared.db.models.ingestion import KbDocument


@dataclass(frozen=True)
class NewIndex:
    """A pass's new content and its chunk set, ready to be written."""

    text: str
    digest: str
    fingerprint: str
    chunks: list[Chunk]
    vectors: list[PackedVector]


def write_index(
    session: Session,
    document: store.DocumentState,
    new: NewIndex,
    now: datetime,
    loaded: KbDocument | None,
) -> int | None:
    """Write ``new`` as the document's current content and chunk set and mark it ready with
    its usage event, if the submission ``document`` was read at is still the document's
    and in ``processing``; returns the version, or None when nothing was written.

    Content equal to the current version's (only the chunker or embedder changed) keeps
    its version; anything else becomes version ``current_version + 1``, and versions older
    than the retained ten superseded ones are deleted. One statement writes the version,
    deletes the previous chunk set, marks the document and records the event
    (:func:`store.mark_indexed`); one ``COPY`` adds the new chunks. ``loaded``: the
    document's ORM instance in the session, if the pass holds one.
    """
    version = document.current_version
    new_version = None
    if new.digest != document.content_hash or version == 0:
        version += 1
        new_version = store.NewVersion(version, new.text, new.digest, document.submission_cause)
    count = len(new.chunks)
    tokens = sum(chunk.token_count for chunk in new.chunks)
    written = store.mark_indexed(
        session,
        document,
        version=version,
        content_hash=new.digest,
        index_fingerprint=new.fingerprint,
        new_version=new_version,
        payload={"chunks": count, "tokens": tokens, "embedded": count},
        now=now,
        loaded=loaded,
    )
    if not written:
        return None
    copy_kb_chunks(
        session,
        organization_id=document.organization_id,
        knowledge_base_id=document.knowledge_base_id,
        document_id=document.id,
        chunks=new.chunks,
        vectors=new.vectors,
        audience=list(document.audience),
        created_at=now,
    )
    return version
