"""What one ingestion pass costs in CPU, the worker's and PostgreSQL's, without the job
platform: ``python -m bench.ingestion_passes``.

The benchmark's documents (:mod:`bench.ingestion_corpus`) are stored in ``processing`` in an
embedded PostgreSQL with pgvector, then each goes through
:func:`services.ingestion.ingestion_job.run_ingestion` in this process, as a worker's thread
runs it (its read, extraction, splitting, embedding with the hashing embedder, lock, indexed
state, ``COPY`` and commit), with no queue, middleware or Redis. ``--threads N`` runs the
tenants' documents on N threads (each tenant's one at a time, as the family's group cap
does), each with its own connection. Printed: this process's CPU and the server's (every
process of it) per document, over the documents after the first ``WARM_UP``.

``--split`` (one thread) also prints the server's CPU per statement of the pass: the
backend's CPU read before and after each (tick-sampled, so only meaningful summed over many
documents). CPU, unlike wall time, moves little with other work on the machine, so two
trees are compared by running this from each, alternately.
"""

from __future__ import annotations

import argparse
import collections
import functools
import importlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import stat_fields
from bench.ingestion_corpus import corpus
from bench.ingestion_stack import postgres_cpu_seconds

#: Documents run before the measured ones: imports, the token counter, prepared statements.
WARM_UP = 40
TENANTS = 10
#: Where the pass's statements are sent from, and what each is called in ``--split``.
_DRIVER_MODULES = (
    "services.ingestion.store.document_reads",
    "services.ingestion.store.locks",
    "services.ingestion.store.indexed",
)


def _cpu(pid: int) -> float:
    fields = stat_fields(pid)
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def _database() -> Iterator[tuple[str, int]]:
    from services.app.embedded import start_embedded_postgres
    from shared.db.migrate import upgrade

    with tempfile.TemporaryDirectory(prefix="bench-passes-") as directory:
        service = start_embedded_postgres(Path(directory) / "postgres", port=0, database="passes")
        try:
            upgrade(service.url)
            yield service.url, service.pid
        finally:
            service.stop()


def _statement_name(statement: str) -> str:
    if "advisory" in statement:
        return "lock"
    return "read" if statement.startswith("SELECT") else "indexed state"


def _split_by_statement(backend: int, spent: dict[str, float]) -> None:
    """Count the backend's CPU around each statement of the pass into ``spent``."""
    from sqlalchemy.orm import Session

    from services.indexing.kb_chunks import copy_kb_chunks
    from services.ingestion import index_write

    def timed(name: str | None, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            before = _cpu(backend)
            try:
                return function(*args, **kwargs)
            finally:
                spent[name or _statement_name(args[1])] += _cpu(backend) - before

        return run

    for name in _DRIVER_MODULES:
        module = importlib.import_module(name)
        setattr(module, "driver_execute", timed(None, module.driver_execute))  # noqa: B010
    setattr(index_write, "copy_kb_chunks", timed("copy", copy_kb_chunks))  # noqa: B010
    Session.commit = timed("commit", Session.commit)  # type: ignore[method-assign]


def measure(documents: int, threads: int, split: bool) -> dict[str, Any]:
    """Run ``documents`` passes (after :data:`WARM_UP` more) on ``threads`` threads; the
    CPU per document, in milliseconds."""
    from sqlalchemy import text

    from services.indexing.chunking import Chunker
    from services.indexing.embedders import HashingEmbedder
    from services.ingestion import ingestion_job, store
    from shared.db.base import utcnow
    from shared.db.engine import make_engine, make_session_factory, session_scope

    with _database() as (url, postmaster):
        engine = make_engine(url, pool_size=threads, max_overflow=0)
        sessions = make_session_factory(engine)
        organizations = list(range(101, 101 + TENANTS))
        items: list[tuple[int, int]] = []
        with session_scope(sessions) as session:
            bases = {
                org: store.create_knowledge_base(session, organization_id=org, name="b").id
                for org in organizations
            }
            for i, doc in enumerate(corpus(WARM_UP + documents, prefix="pass")):
                org = organizations[i % TENANTS]
                added = store.add_document(
                    session,
                    organization_id=org,
                    knowledge_base_id=bases[org],
                    name=doc.name,
                    source=store.FileSource(doc.data, doc.content_type, doc.filename),
                )
                items.append((org, added.document.id))
            session.commit()
        chunker, embedder = Chunker(), HashingEmbedder()

        def one_tenant(group: Sequence[tuple[int, int]]) -> None:
            for org, document_id in group:
                ingestion_job.run_ingestion(
                    sessions,
                    organization_id=org,
                    document_id=document_id,
                    chunker=chunker,
                    embedder=embedder,
                    final_attempt=False,
                    now=utcnow(),
                )

        def run(batch: Sequence[tuple[int, int]]) -> None:
            by_tenant: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
            for item in batch:
                by_tenant[item[0]].append(item)
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(one_tenant, by_tenant.values()))

        run(items[:WARM_UP])
        spent: dict[str, float] = collections.defaultdict(float)
        if split:
            with engine.connect() as connection:
                backend = int(connection.execute(text("SELECT pg_backend_pid()")).scalar_one())
            _split_by_statement(backend, spent)
        server, client = postgres_cpu_seconds(postmaster), time.process_time()
        run(items[WARM_UP:])
        server, client = postgres_cpu_seconds(postmaster) - server, time.process_time() - client
        engine.dispose()
    per_document = 1000 / documents
    return {
        "documents": documents,
        "threads": threads,
        "client_ms": round(client * per_document, 2),
        "postgres_ms": round(server * per_document, 2),
        "postgres_ms_by_statement": {k: round(v * per_document, 2) for k, v in spent.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=400)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--split", action="store_true", help="PostgreSQL's CPU per statement")
    options = parser.parse_args()
    if options.split and options.threads != 1:
        parser.error("--split reads one backend's CPU: it needs --threads 1")
    result = measure(options.documents, options.threads, options.split)
    print(
        f"{result['documents']} passes on {result['threads']} thread(s): "
        f"this process {result['client_ms']} ms of CPU a document, "
        f"PostgreSQL {result['postgres_ms']} ms"
    )
    for name, ms in sorted(result["postgres_ms_by_statement"].items(), key=lambda kv: -kv[1]):
        print(f"  {name}: {ms} ms")


if __name__ == "__main__":
    main()
