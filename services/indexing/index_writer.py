"""One document's chunks, embeddings and full-text search row, replaced as one unit.

The rule every index target keeps: a document's chunk set is replaced in one transaction,
the caller's, which commits the old set's delete and the new one's insert together, so a
reader sees the old index or the new one, never half of either. The targets:

* Rails ``document_chunks`` and ``pg_search_documents``: :func:`replace_document_index`
  here, which the knowledge sync's chunk step (seed 000) calls; it never commits.
* api2 ``kb_chunks``: :func:`services.indexing.kb_chunks.replace_kb_chunks`, which
  ingestion (seed 003) calls under the document's row lock, with the document's version.

:func:`index_fingerprint` (chunker and embedder) says whether a stored chunk set is stale
for either target.

Concurrency: embeddings are computed before any lock (they are slow and may wait on a
provider), then ``pg_advisory_xact_lock`` on (organization, source type, source id)
serialises the delete-and-insert of concurrent replacements of the same document until
their transactions end, so concurrent runs leave exactly one chunk set.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import delete, func, insert, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.indexing.chunk_batches import PackedVector, embed_chunks, insert_in_batches
from services.indexing.chunking import Chunk
from services.indexing.digests import content_hash
from services.indexing.embedders import Embedder
from shared.db.models import DocumentChunk, PgSearchDocument
from shared.db.tenant import organization_filter
from shared.errors import Retryable, Unrecoverable

#: The chunk metadata key holding how a chunk set was made (chunker and embedder).
FINGERPRINT_KEY = "index_fingerprint"


class DocumentChunker(Protocol):
    """What the writer needs of a chunker (:class:`~services.indexing.chunking.Chunker`)."""

    @property
    def fingerprint(self) -> str: ...

    def split(self, text: str) -> list[Chunk]: ...


@dataclass(frozen=True)
class IndexOutcome:
    """What a replacement did.

    Attributes:
      chunk_count: chunks the document has now (0 when its content is empty).
      unchanged: the stored chunk set already matched (same content hash, chunker and
        embedder) and was kept; a stale search row may still have been rewritten.
      content_hash: SHA-256 (hex) of the title and content, stored on every chunk.
    """

    chunk_count: int
    unchanged: bool
    content_hash: str


def index_fingerprint(chunker: DocumentChunker, embedder: Embedder) -> str:
    """Everything besides the text that decides a chunk set; another one makes it stale."""
    return f"{chunker.fingerprint}|{embedder.name}:{embedder.dimensions}"


def search_content(title: str, content: str) -> str:
    """The full-text search row's content: the title, a blank line, the content."""
    return f"{title}\n\n{content}" if title else content


def replace_document_index(
    session: Session,
    *,
    organization_id: int,
    source_type: str,
    source_id: int,
    title: str,
    content: str,
    chunker: DocumentChunker,
    embedder: Embedder,
    searchable_type: str | None = None,
) -> IndexOutcome:
    """Make the document's chunks and search row those of ``title`` and ``content``.

    Idempotent: when the stored chunk set has the same content hash and was made by the
    same chunker and embedder, nothing is embedded. Empty content removes the document's
    chunks and search row. Runs in the caller's transaction; the caller commits.

    Parameters:
      session: the caller's session; its transaction holds the document's lock until it ends.
      organization_id: the tenant; every statement filters on it.
      source_type / source_id: the polymorphic owner (``KnowledgeBaseDocument``, id).
      searchable_type: the search row's type; defaults to ``source_type``.

    Returns:
      the :class:`IndexOutcome`.

    Raises:
      Unrecoverable: another organization's chunks occupy this (source type, source id);
        nothing was written.
      Retryable: the stored index changed between the unchanged check and the lock.
      Delay / Retryable / Unrecoverable: from the embedder, before anything was written.
    """
    target = _Target(organization_id, source_type, source_id, searchable_type or source_type)
    digest = content_hash(title, content)
    if not content.strip():
        return _remove_all(session, target, digest)

    fingerprint = index_fingerprint(chunker, embedder)
    wanted_search = search_content(title, content)
    current = _current_chunk_count(session, target, digest, fingerprint)
    if current and _search_row_is(session, target, wanted_search):
        return IndexOutcome(chunk_count=current, unchanged=True, content_hash=digest)

    chunks, vectors = ([], []) if current else _split_and_embed(chunker, embedder, content)
    if not current and not chunks:
        return _remove_all(session, target, digest)

    _lock(session, target)
    # Under the lock and READ COMMITTED, this sees whatever a concurrent run committed.
    current = _current_chunk_count(session, target, digest, fingerprint)
    if not current and not chunks:
        # The matching chunk set seen before the lock was replaced meanwhile, and embedding
        # under the lock would hold it for seconds: let the retry start over.
        raise Retryable(f"{source_type} {source_id}: index replaced concurrently")
    new_set = None if current else _ChunkSet(chunks, vectors, digest, fingerprint)
    _write_locked(session, target, new_set, wanted_search)
    if current:
        return IndexOutcome(chunk_count=current, unchanged=True, content_hash=digest)
    return IndexOutcome(chunk_count=len(chunks), unchanged=False, content_hash=digest)


def _split_and_embed(
    chunker: DocumentChunker, embedder: Embedder, content: str
) -> tuple[list[Chunk], list[PackedVector]]:
    """The content's chunks and their vectors, computed before any lock is taken."""
    chunks = chunker.split(content)
    return chunks, embed_chunks(embedder, chunks) if chunks else []


def remove_document_index(
    session: Session,
    *,
    organization_id: int,
    source_type: str,
    source_id: int,
    searchable_type: str | None = None,
) -> int:
    """Delete the document's chunks and its search row in the caller's transaction; the
    caller commits.

    Parameters:
      searchable_type: the search row's type; defaults to ``source_type``.

    Returns:
      the number of chunk and search rows deleted.
    """
    target = _Target(organization_id, source_type, source_id, searchable_type or source_type)
    return _lock_and_remove(session, target)


@dataclass(frozen=True)
class _Target:
    organization_id: int
    source_type: str
    source_id: int
    searchable_type: str

    @property
    def lock_key(self) -> int:
        """A signed 64-bit advisory lock key for this document, the same in every process."""
        name = f"{self.organization_id}:{self.source_type}:{self.source_id}"
        digest = hashlib.blake2b(name.encode(), digest_size=8, person=b"document-index").digest()
        return int.from_bytes(digest, "big", signed=True)


@dataclass(frozen=True)
class _ChunkSet:
    chunks: list[Chunk]
    vectors: list[PackedVector]
    digest: str
    fingerprint: str


def _write_locked(
    session: Session, target: _Target, new_set: _ChunkSet | None, wanted_search: str
) -> None:
    """Under the document's lock, in a savepoint: replace the chunks with ``new_set`` (when
    given) and the search row with ``wanted_search`` (when it differs)."""
    try:
        with session.begin_nested():
            if new_set is not None:
                _delete_chunks(session, target)
                _insert_chunks(
                    session,
                    target,
                    new_set.chunks,
                    new_set.vectors,
                    new_set.digest,
                    new_set.fingerprint,
                )
            if not _search_row_is(session, target, wanted_search):
                _replace_search_row(session, target, wanted_search)
    except IntegrityError as exc:
        # With our own rows deleted under the lock, only another organization's chunks can
        # hold this (source_type, source_id, position): a cross-tenant id.
        raise Unrecoverable(
            f"{target.source_type} {target.source_id}: its chunks belong to another "
            f"organization than {target.organization_id}"
        ) from exc


def _lock(session: Session, target: _Target) -> None:
    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": target.lock_key})


def _chunks_of(target: _Target) -> list[Any]:
    return [
        organization_filter(DocumentChunk, target.organization_id),
        DocumentChunk.source_type == target.source_type,
        DocumentChunk.source_id == target.source_id,
    ]


def _search_rows_of(target: _Target) -> list[Any]:
    return [
        organization_filter(PgSearchDocument, target.organization_id),
        PgSearchDocument.searchable_type == target.searchable_type,
        PgSearchDocument.searchable_id == target.source_id,
    ]


def _current_chunk_count(session: Session, target: _Target, digest: str, fingerprint: str) -> int:
    """The size of the stored chunk set when it is complete and made from this content by
    this chunker and embedder; 0 otherwise."""
    made_here = (DocumentChunk.content_hash == digest) & (
        DocumentChunk.metadata_[FINGERPRINT_KEY].astext == fingerprint
    )
    row = session.execute(
        select(
            func.count(),
            func.count().filter(made_here),
            func.min(DocumentChunk.position),
            func.max(DocumentChunk.position),
        ).where(*_chunks_of(target))
    ).one()
    total, matching, first, last = row
    complete = total > 0 and matching == total and first == 0 and last == total - 1
    return int(total) if complete else 0


def _search_row_is(session: Session, target: _Target, wanted: str) -> bool:
    contents = session.scalars(select(PgSearchDocument.content).where(*_search_rows_of(target)))
    return list(contents) == [wanted]


def _delete_chunks(session: Session, target: _Target) -> int:
    result = session.execute(
        delete(DocumentChunk).where(*_chunks_of(target)),
        execution_options={"synchronize_session": False},
    )
    return int(getattr(result, "rowcount", 0) or 0)


def _delete_search_rows(session: Session, target: _Target) -> int:
    result = session.execute(
        delete(PgSearchDocument).where(*_search_rows_of(target)),
        execution_options={"synchronize_session": False},
    )
    return int(getattr(result, "rowcount", 0) or 0)


def _insert_chunks(
    session: Session,
    target: _Target,
    chunks: list[Chunk],
    vectors: list[PackedVector],
    digest: str,
    fingerprint: str,
) -> None:
    insert_in_batches(
        session,
        insert(DocumentChunk),
        (
            {
                "organization_id": target.organization_id,
                "source_type": target.source_type,
                "source_id": target.source_id,
                "position": chunk.position,
                "content": chunk.content,
                "content_hash": digest,
                "token_count": chunk.token_count,
                "embedding": vector,
                "metadata_": {FINGERPRINT_KEY: fingerprint},
            }
            for chunk, vector in zip(chunks, vectors, strict=True)
        ),
    )


def _replace_search_row(session: Session, target: _Target, content: str) -> None:
    _delete_search_rows(session, target)
    session.execute(
        insert(PgSearchDocument),
        [
            {
                "organization_id": target.organization_id,
                "searchable_type": target.searchable_type,
                "searchable_id": target.source_id,
                "content": content,
            }
        ],
    )


def _remove_all(session: Session, target: _Target, digest: str) -> IndexOutcome:
    removed = _lock_and_remove(session, target)
    return IndexOutcome(chunk_count=0, unchanged=not removed, content_hash=digest)


def _lock_and_remove(session: Session, target: _Target) -> int:
    _lock(session, target)
    return _delete_chunks(session, target) + _delete_search_rows(session, target)
