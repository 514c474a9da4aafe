"""The machine's own ingestion ceiling (issue 16, target 4), measured in the benchmark's run.

The same documents go through extract, split, embed (the hashing embedder) and a plain write
of the chunks (``COPY`` into a scratch table, one transaction per document) with nothing
else: no queue, no job records, no document versions. Two ways:

- **sequential**: one process does everything, one document after another;
- **pipelined**: two processes, one extracting, splitting and embedding, the other writing,
  joined by a bounded queue (the best split of this work over this machine's two cores);
- **pipelined, indexed**: the same, writing into a scratch table made ``LIKE api2.kb_chunks
  INCLUDING ALL``: the same columns, the generated ``content_tsv`` and ``embedding_half``,
  and the same six indexes (HNSW, full text, the covering scan index, three B-trees), but no
  foreign key. It is what a searchable chunk costs any writer, so the gap between it and the
  platform is the platform's own.

The first two write bare rows (no index, no generated column): issue 16's target 4 is
measured against the bare pipelined one. Every ceiling sends vectors as text, as it always
has; the platform now sends them binary (cheaper on both sides), so these are ceilings of
this pipeline, a little under the machine's.

The platform's throughput (real workers) is then reported as a ratio to each.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from bench.common import machine_busy_seconds, rnd

TABLE = "bench_ceiling_chunks"
#: The scratch table with api2.kb_chunks' columns, generated columns and indexes.
INDEXED_TABLE = "bench_ceiling_indexed_chunks"
#: Tenants the indexed rows are spread over, as the platform's run spreads its documents.
TENANTS = 10
_DONE = None


#: ``python -m bench.ingestion --count-by-bisection`` sets it: the chunker counts a chunk's
#: tokens the way it did before issue 16 (bisecting the splitter), in every process.
BISECTION_VARIABLE = "BENCH_COUNT_BY_BISECTION"


def apply_token_count_mode() -> None:
    """In this process, count by bisection when the run asks for the old counter."""
    if os.environ.get(BISECTION_VARIABLE) == "1":
        from services.indexing import chunking

        chunking.counter_for_model = lambda model: None  # type: ignore[assignment]


def _dsn(database_url: str) -> str:
    return database_url.replace("postgresql+psycopg://", "postgresql://", 1)


def _prepare(database_url: str, dimensions: int) -> None:
    import psycopg

    with psycopg.connect(_dsn(database_url), autocommit=True) as connection:
        connection.execute(f"DROP TABLE IF EXISTS {TABLE}")
        connection.execute(
            f"CREATE TABLE {TABLE} (document integer, position integer, content text, "
            f"token_count integer, embedding vector({dimensions}))"
        )


def _prepare_indexed(database_url: str) -> list[str]:
    """The indexed scratch table, empty; the names of its indexes."""
    import psycopg

    with psycopg.connect(_dsn(database_url), autocommit=True) as connection:
        connection.execute(f"DROP TABLE IF EXISTS {INDEXED_TABLE}")
        # LIKE never copies foreign keys; INCLUDING ALL copies the rest (generated columns,
        # identity, defaults, storage, indexes and unique constraints).
        connection.execute(f"CREATE TABLE {INDEXED_TABLE} (LIKE api2.kb_chunks INCLUDING ALL)")
        rows = connection.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s ORDER BY indexname",
            (INDEXED_TABLE,),
        )
        return [name for (name,) in rows]


def _drop(database_url: str) -> None:
    import psycopg

    with psycopg.connect(_dsn(database_url), autocommit=True) as connection:
        connection.execute(f"DROP TABLE IF EXISTS {TABLE}")
        connection.execute(f"DROP TABLE IF EXISTS {INDEXED_TABLE}")


def _produce(documents: Sequence[Any], dimensions: int) -> Any:
    """Yield (document index, rows) for each document: extracted, split and embedded."""
    from bench.ingestion_corpus import CONTENT_TYPES
    from services.indexing.chunking import Chunker
    from services.indexing.embedders import HashingEmbedder
    from services.indexing.extract import extract

    apply_token_count_mode()
    chunker, embedder = Chunker(), HashingEmbedder(dimensions)
    for index, document in enumerate(documents):
        text = extract(
            document.data, content_type=CONTENT_TYPES[document.kind], filename=document.name
        ).text
        chunks = chunker.split(text)
        vectors = embedder.embed([chunk.content for chunk in chunks])
        yield (
            index,
            [
                (index, chunk.position, chunk.content, chunk.token_count, _vector(vector))
                for chunk, vector in zip(chunks, vectors, strict=True)
            ],
        )


def _vector(vector: Sequence[float]) -> str:
    return "[" + ",".join(map(repr, vector)) + "]"


class _Writer:
    """Writes each document's rows with one COPY and a commit: into the bare table, or
    (``indexed``) into the indexed one, as kb_chunks rows of one of :data:`TENANTS`."""

    def __init__(self, database_url: str, indexed: bool = False) -> None:
        import psycopg

        self.connection = psycopg.connect(_dsn(database_url))
        self.indexed = indexed
        self.created_at = datetime.now(UTC)
        self.tokens = 0
        self.chunks = 0

    def write(self, rows: Sequence[tuple[Any, ...]]) -> None:
        with self.connection.cursor() as cursor:
            if self.indexed:
                self._copy_indexed(cursor, rows)
            else:
                with cursor.copy(
                    f"COPY {TABLE} (document, position, content, token_count, embedding) FROM STDIN"
                ) as copy:
                    for row in rows:
                        copy.write_row(row)
        self.connection.commit()
        self.chunks += len(rows)
        self.tokens += sum(row[3] for row in rows)

    def _copy_indexed(self, cursor: Any, rows: Sequence[tuple[Any, ...]]) -> None:
        with cursor.copy(
            f"COPY {INDEXED_TABLE} (organization_id, knowledge_base_id, document_id, position, "
            "content, token_count, embedding, audience, created_at) FROM STDIN"
        ) as copy:
            for document, position, content, token_count, embedding in rows:
                tenant = document % TENANTS + 1
                copy.write_row(
                    (
                        tenant,
                        tenant,
                        document,
                        position,
                        content,
                        token_count,
                        embedding,
                        [],
                        self.created_at,
                    )
                )

    def close(self) -> None:
        self.connection.close()


def _sequential(database_url: str, documents: Sequence[Any], dimensions: int) -> dict[str, Any]:
    writer = _Writer(database_url)
    try:
        busy = machine_busy_seconds()
        started = time.perf_counter()
        for _, rows in _produce(documents, dimensions):
            writer.write(rows)
        wall = time.perf_counter() - started
        busy = machine_busy_seconds() - busy
    finally:
        writer.close()
    return _figures(wall, busy, writer.chunks, writer.tokens, len(documents))


def _producer_main(documents: Sequence[Any], dimensions: int, queue: Any, go: Any) -> None:
    go.wait()
    for item in _produce(documents, dimensions):
        queue.put(item)
    queue.put(_DONE)


def _writer_main(database_url: str, queue: Any, go: Any, results: Any, indexed: bool) -> None:
    writer = _Writer(database_url, indexed)
    go.wait()
    try:
        while (item := queue.get()) is not _DONE:
            writer.write(item[1])
        results.put((writer.chunks, writer.tokens, time.perf_counter()))
    finally:
        writer.close()


def _pipelined(
    database_url: str, documents: Sequence[Any], dimensions: int, indexed: bool = False
) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    queue, results, go = context.Queue(maxsize=32), context.Queue(), context.Event()
    producer = context.Process(target=_producer_main, args=(documents, dimensions, queue, go))
    writer = context.Process(target=_writer_main, args=(database_url, queue, go, results, indexed))
    producer.start()
    writer.start()
    try:
        time.sleep(2.0)  # both processes imported and connected before the clock starts
        busy = machine_busy_seconds()
        started = time.perf_counter()
        go.set()
        chunks, tokens, finished = results.get(timeout=1800)
        wall = finished - started
        busy = machine_busy_seconds() - busy
    finally:
        for process in (producer, writer):
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
                process.join()
    return _figures(wall, busy, chunks, tokens, len(documents))


def _figures(wall: float, busy: float, chunks: int, tokens: int, documents: int) -> dict[str, Any]:
    return {
        "wall_seconds": rnd(wall, 2),
        "documents": documents,
        "chunks": chunks,
        "tokens": tokens,
        "documents_per_second": rnd(documents / wall, 1),
        "chunks_per_second": rnd(chunks / wall, 1),
        "tokens_per_minute": round(tokens / wall * 60),
        "machine_busy_seconds": rnd(busy, 1),
    }


def measure_ceiling(
    database_url: str, documents: Sequence[Any], dimensions: int, say: Any
) -> dict[str, Any]:
    """Sequential and pipelined ceilings of ``documents`` on this machine into a bare table,
    and pipelined into a table indexed like api2.kb_chunks (scratch tables dropped
    afterwards)."""
    _prepare(database_url, dimensions)
    try:
        sequential = _sequential(database_url, documents, dimensions)
        say(f"ceiling, sequential: {sequential['wall_seconds']} s")
        _prepare(database_url, dimensions)
        pipelined = _pipelined(database_url, documents, dimensions)
        say(f"ceiling, pipelined over two processes: {pipelined['wall_seconds']} s")
        indexes = _prepare_indexed(database_url)
        indexed = _pipelined(database_url, documents, dimensions, indexed=True)
        indexed["indexes"] = indexes
        say(f"ceiling, pipelined into a table like kb_chunks: {indexed['wall_seconds']} s")
    finally:
        _drop(database_url)
    return {"sequential": sequential, "pipelined": pipelined, "pipelined_indexed": indexed}
