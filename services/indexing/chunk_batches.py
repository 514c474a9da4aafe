"""Embedding and writing a chunk set in bounded batches, so a large document's memory stays
flat: the worker holds its chunk texts and one packed vector per chunk, never every
vector as Python floats nor every row's parameters at once.

A Python list of 384 floats takes about 12 KiB; the same vector packed in an
``array('d')`` takes 3 KiB, with the same float64 values (lossless on both the pgvector
and the ``float8[]`` storage). A 10 MB text makes about 6,000 chunks: 72 MiB of lists
against 18 MiB packed.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, TypeAlias

from sqlalchemy import Executable
from sqlalchemy.orm import Session

from services.indexing.chunking import Chunk
from services.indexing.embedders import Embedder
from shared.errors import Unrecoverable

#: Texts handed to the embedder per call (rounded up to a multiple of its own batch size,
#: so batching here never splits one of its requests in two).
EMBED_BATCH_TEXTS = 256
#: Rows per INSERT statement: their parameters are built, sent and dropped together.
INSERT_BATCH_ROWS = 500

#: One chunk's embedding, packed (8 bytes a dimension).
PackedVector: TypeAlias = "array[float]"


def embed_batch_size(embedder: Embedder) -> int:
    """Texts per embedder call: :data:`EMBED_BATCH_TEXTS` rounded up to a multiple of the
    embedder's ``batch_size`` when it has one."""
    own = getattr(embedder, "batch_size", None)
    if not isinstance(own, int) or own < 1:
        return EMBED_BATCH_TEXTS
    return -(-EMBED_BATCH_TEXTS // own) * own


def embed_chunks(embedder: Embedder, chunks: Sequence[Chunk]) -> list[PackedVector]:
    """One packed vector per chunk, in order, embedding :func:`embed_batch_size` texts at a
    time.

    Raises:
      Unrecoverable: the embedder returned another number of vectors than texts, or
        vectors of another length than its ``dimensions``.
      Delay / Retryable / Unrecoverable: from the embedder.
    """
    size = embed_batch_size(embedder)
    packed: list[PackedVector] = []
    for start in range(0, len(chunks), size):
        batch = chunks[start : start + size]
        vectors = embedder.embed([chunk.content for chunk in batch])
        if len(vectors) != len(batch):
            raise Unrecoverable(
                f"embedder {embedder.name} returned {len(vectors)} vectors for {len(batch)} chunks"
            )
        for vector in vectors:
            if len(vector) != embedder.dimensions:
                raise Unrecoverable(
                    f"embedder {embedder.name} returned a {len(vector)}-dimensional vector, "
                    f"declared {embedder.dimensions}"
                )
            packed.append(array("d", vector))
        del vectors
    return packed


def _batched(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    iterator = iter(rows)
    while batch := list(islice(iterator, size)):
        yield batch


def insert_in_batches(
    session: Session, statement: Executable, rows: Iterable[dict[str, Any]]
) -> None:
    """Execute ``statement`` (an ``insert(Model)``) over ``rows``, :data:`INSERT_BATCH_ROWS`
    at a time, in the caller's transaction: the rows commit together or not at all. Pass
    a generator so each batch's parameters exist only while it is sent."""
    for batch in _batched(rows, INSERT_BATCH_ROWS):
        session.execute(statement, batch)
