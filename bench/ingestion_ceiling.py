"""The machine's own ingestion ceiling, measured in the benchmark's run.

The same documents go through extract, split, embed (the hashing embedder) and a plain write
of the chunks (``COPY`` into a scratch table, one transaction per document) with nothing
else: no queue, no job records, no document versions. Two ways:

- **sequential**: one process does everything, one document after another;
- **pipelined**: two processes, one extracting, splitting and embedding, the other writing,
  joined by a bounded queue (the best split of this work over this machine's two cores);
- **pipelined, indexed**: the same, writing into a scratch table made ``LIKE api2.kb_chunks
  INCLUDING ALL``: the same columns, the generated ``content_tsv`` and ``embedding_half``,
  and the same six indexes (HNSW, full text, the covering scan index, three B-trees), but no
  foreign key; once with one writer, as above, and once with two (index upkeep makes the
  writer the slow side, and a second connection lets the server use the second core). It
  is what a searchable chunk costs any writer, so the gap between it and the platform is
  the platform's own.

The first two write bare rows (no index, no generated column): the platform's ingestion is
measured against the bare pipelined one. Every ceiling sends vectors as text, as it always
has; the platform sends them binary (cheaper on both sides), so these are ceilings of
this pipeline, a little under the machine's.

The platform's throughput (real workers) is then reported as a ratio to each.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeAlias

from bench.common import machine_busy_seconds, rnd

#: Reads a process tree's CPU seconds so far (the embedded PostgreSQL's).
CpuClock: TypeAlias = Callable[[], float]

TABLE = "bench_ceiling_chunks"
#: The scratch table with api2.kb_chunks' columns, generated columns and indexes.
INDEXED_TABLE = "bench_ceiling_indexed_chunks"
#: Tenants the indexed rows are spread over, as the platform's run spreads its documents.
TENANTS = 10
_DONE = None


#: ``python -m bench.ingestion --count-by-bisection`` sets it: the chunker counts a chunk's
#: tokens by bisecting the splitter (the fallback counter), in every process.
BISECTION_VARIABLE = "BENCH_COUNT_BY_BISECTION"


def apply_token_count_mode() -> None:
    """In this process, count by bisection when the run asks for the old counter."""
    if os.environ.get(BISECTION_VARIABLE) == "1":
        from services.indexing import chunking

        chunking.counter_for_model = lambda model: None  # type: ignore[assignment,attr-defined]


def warm_up() -> None:
    """Pay this process's one-off costs before a measured phase starts: the token counter
    (ranks read from the splitter's library, the encoding built), the splitter, and the
    extraction libraries' imports. The workers and a ceiling's producer both call it before
    their start signal, so neither phase carries them."""
    from services.indexing import extract
    from services.indexing.chunking import Chunker

    apply_token_count_mode()
    Chunker().split("Warm-up text. " * 64)
    extract.extract(b"<p>warm-up</p>", content_type="text/html", filename="warm-up.html")


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


def _sequential(
    database_url: str, documents: Sequence[Any], dimensions: int, postgres_cpu: CpuClock
) -> dict[str, Any]:
    writer = _Writer(database_url)
    try:
        busy, database, client = machine_busy_seconds(), postgres_cpu(), time.process_time()
        started = time.perf_counter()
        for _, rows in _produce(documents, dimensions):
            writer.write(rows)
        wall = time.perf_counter() - started
        busy, database = machine_busy_seconds() - busy, postgres_cpu() - database
        client = time.process_time() - client
    finally:
        writer.close()
    return _figures(wall, busy, client, database, writer.chunks, writer.tokens, len(documents))


def _producer_main(
    documents: Sequence[Any], dimensions: int, queue: Any, go: Any, writers: int, results: Any
) -> None:
    warm_up()
    go.wait()
    cpu = time.process_time()
    for item in _produce(documents, dimensions):
        queue.put(item)
    for _ in range(writers):
        queue.put(_DONE)
    results.put(("producer", time.process_time() - cpu))


def _writer_main(database_url: str, queue: Any, go: Any, results: Any, indexed: bool) -> None:
    writer = _Writer(database_url, indexed)
    go.wait()
    cpu = time.process_time()
    try:
        while (item := queue.get()) is not _DONE:
            writer.write(item[1])
        finished = time.perf_counter()
        results.put(("writer", writer.chunks, writer.tokens, finished, time.process_time() - cpu))
    finally:
        writer.close()


def _pipelined(
    database_url: str,
    documents: Sequence[Any],
    dimensions: int,
    postgres_cpu: CpuClock,
    indexed: bool = False,
    writers: int = 1,
) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    queue, results, go = context.Queue(maxsize=32), context.Queue(), context.Event()
    processes = [
        context.Process(
            target=_producer_main, args=(documents, dimensions, queue, go, writers, results)
        ),
        *(
            context.Process(target=_writer_main, args=(database_url, queue, go, results, indexed))
            for _ in range(writers)
        ),
    ]
    for process in processes:
        process.start()
    try:
        time.sleep(2.0)  # every process imported and connected before the clock starts
        busy, database = machine_busy_seconds(), postgres_cpu()
        started = time.perf_counter()
        go.set()
        reports = [results.get(timeout=1800) for _ in range(writers + 1)]
        done = [report for report in reports if report[0] == "writer"]
        wall = max(report[3] for report in done) - started
        busy, database = machine_busy_seconds() - busy, postgres_cpu() - database
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
                process.join()
    chunks, tokens = sum(d[1] for d in done), sum(d[2] for d in done)
    client = sum(report[-1] for report in reports)
    return _figures(wall, busy, client, database, chunks, tokens, len(documents)) | {
        "writers": writers
    }


def _figures(
    wall: float,
    busy: float,
    client: float,
    database: float,
    chunks: int,
    tokens: int,
    documents: int,
) -> dict[str, Any]:
    """A run's figures; ``client``: its own processes' CPU seconds, ``database``: the
    server's (which, with nothing else running on it, is all this run's)."""
    return {
        "wall_seconds": rnd(wall, 2),
        "documents": documents,
        "chunks": chunks,
        "tokens": tokens,
        "documents_per_second": rnd(documents / wall, 1),
        "chunks_per_second": rnd(chunks / wall, 1),
        "tokens_per_minute": round(tokens / wall * 60),
        "machine_busy_seconds": rnd(busy, 1),
        "client_cpu_seconds": rnd(client, 1),
        "postgres_cpu_seconds": rnd(database, 1),
        "cpu_seconds_per_million_tokens": rnd((client + database) / tokens * 1e6, 2),
    }


def measure_pipelined(
    database_url: str,
    documents: Sequence[Any],
    dimensions: int,
    postgres_cpu: CpuClock,
    *,
    indexed: bool,
    writers: int = 1,
) -> dict[str, Any]:
    """One pipelined ceiling into a fresh scratch table (bare, or ``indexed`` like
    api2.kb_chunks), dropped afterwards."""
    indexes = _prepare_indexed(database_url) if indexed else []
    if not indexed:
        _prepare(database_url, dimensions)
    try:
        run = _pipelined(database_url, documents, dimensions, postgres_cpu, indexed, writers)
    finally:
        _drop(database_url)
    return run | ({"indexes": indexes} if indexed else {})


def measure_ceiling(
    database_url: str,
    documents: Sequence[Any],
    dimensions: int,
    say: Any,
    postgres_cpu: CpuClock = lambda: 0.0,
) -> dict[str, Any]:
    """Sequential and pipelined ceilings of ``documents`` on this machine into a bare table,
    and pipelined into a table indexed like api2.kb_chunks with one writer and with two
    (scratch tables dropped afterwards). ``postgres_cpu``: the server's CPU seconds so far."""
    _prepare(database_url, dimensions)
    try:
        sequential = _sequential(database_url, documents, dimensions, postgres_cpu)
        say(f"ceiling, sequential: {sequential['wall_seconds']} s")
        _prepare(database_url, dimensions)
        pipelined = _pipelined(database_url, documents, dimensions, postgres_cpu)
        say(f"ceiling, pipelined over two processes: {pipelined['wall_seconds']} s")
        indexed = {}
        for writers in (1, 2):
            indexes = _prepare_indexed(database_url)
            run = _pipelined(database_url, documents, dimensions, postgres_cpu, True, writers)
            indexed[writers] = run | {"indexes": indexes}
            say(
                f"ceiling, pipelined into a table like kb_chunks, {writers} writer(s): "
                f"{run['wall_seconds']} s"
            )
    finally:
        _drop(database_url)
    return {
        "sequential": sequential,
        "pipelined": pipelined,
        "pipelined_indexed": indexed[1],
        "pipelined_indexed_two_writers": indexed[2],
    }
