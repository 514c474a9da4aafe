"""The ingestion benchmark's stack: an embedded PostgreSQL with pgvector (temporary, migrated),
a fresh Redis namespace, the driver's platform, worker processes serving the fast tier, and
the driver's document helpers (submitted the way the upload route does it).
"""

# Spawned worker processes import this module: nothing heavy at import time.
from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import connect, delete_namespace, new_namespace, process_stats, stat_fields
from bench.worker_pool import Counters, WorkerPool, stop_event_from, wait_for_go

NAME = "ingestion"
#: The longest any wait for documents to settle may take.
SETTLE_TIMEOUT = 1_800.0


@dataclass
class Stack:
    values: dict[str, Any]
    platform: Any
    directory: Path
    postgres_pid: int = 0

    def postgres_cpu_seconds(self) -> float:
        """CPU time the embedded PostgreSQL has used so far: its postmaster, the live
        processes it started (backends, background workers) and those it has reaped."""
        return postgres_cpu_seconds(self.postgres_pid)


def postgres_cpu_seconds(postmaster: int) -> float:
    """User + system CPU of ``postmaster``, its live children and its reaped children.

    A child reaped while its siblings are read would count twice or not at all, so the
    reading is taken again until the postmaster's reaped-children time is the same before
    and after it.
    """
    while True:
        before = stat_fields(postmaster)
        if before is None:
            return 0.0
        children = sum(
            int(fields[11]) + int(fields[12])
            for _, fields in process_stats()
            if fields[1] == str(postmaster)
        )
        after = stat_fields(postmaster)
        if after is None:
            return 0.0
        if after[13:15] == before[13:15]:
            own = sum(int(after[i]) for i in (11, 12, 13, 14))
            return (own + children) / os.sysconf("SC_CLK_TCK")


@contextmanager
def stack(redis_url: str, poll_ms: int) -> Iterator[Stack]:
    """A migrated embedded PostgreSQL with pgvector and a fresh Redis namespace."""
    from services.app.bootstrap import bootstrap
    from services.app.embedded import start_embedded_postgres
    from shared.config import load_settings
    from shared.db.migrate import upgrade

    namespace = new_namespace(NAME)
    client = connect(redis_url)
    with tempfile.TemporaryDirectory(prefix="bench-ingestion-") as directory:
        service = start_embedded_postgres(
            Path(directory) / "postgres", port=0, database="bench_ingestion"
        )
        platform = None
        try:
            upgrade(service.url)
            values = {
                "environment": "test",
                "egress_allowed_networks": "127.0.0.1/32",  # the fakes listen on loopback
                "redis_url": redis_url,
                "database_url": service.url,
                "redis_namespace": namespace,
                "data_dir": str(Path(directory) / "data"),
                "log_level": "WARNING",
                "worker_poll_ms": poll_ms,
                "worker_drain_seconds": 10,
                "flag_cache_seconds": 5.0,
                "embedder": "hashing",
            }
            platform = bootstrap(load_settings(**values), component="bench-ingestion")
            yield Stack(values, platform, Path(directory), service.pid)
        finally:
            if platform is not None:
                platform.close()
            delete_namespace(client, namespace)
            client.close()
            service.stop()


def worker_main(
    slot: int, shared: Any, go: Any, stop: Any, values: dict[str, Any], threads: int
) -> None:
    """A worker process: the production platform, serving the fast tier until ``stop``."""
    from bench.ingestion_ceiling import warm_up
    from services.app.bootstrap import bootstrap
    from shared.config import load_settings
    from tiers.worker import serve

    warm_up()
    platform = bootstrap(load_settings(**values), component=f"bench-ingestion-{slot}")
    broker = platform.broker
    broker.add_middleware(Counters(shared, slot), before=type(broker.middleware[0]))
    stopping = stop_event_from(stop)
    wait_for_go(shared, slot, go)
    if not stopping.is_set():
        serve(
            broker,
            platform.registry.queues_of_tier("fast"),
            threads=threads,
            stop=stopping,
            poll_ms=values["worker_poll_ms"],
            drain_seconds=values["worker_drain_seconds"],
        )
    platform.close()


@contextmanager
def workers(
    env: Stack,
    processes: int,
    threads: int,
    name: str,
    target: Callable[..., None] | None = None,
) -> Iterator[WorkerPool]:
    """``processes`` worker processes running ``target`` (:func:`worker_main` when None)."""
    pool = WorkerPool(
        target or worker_main, (env.values, threads), processes, name=f"{NAME}-{name}"
    )
    try:
        pool.start()
        yield pool
    finally:
        pool.shutdown()


# -- documents ---------------------------------------------------------------------------------


def knowledge_bases(env: Stack, organizations: Sequence[int]) -> dict[int, int]:
    from services.ingestion import store
    from shared.db.engine import session_scope

    with session_scope(env.platform.sessions) as session:
        bases = {
            org: store.create_knowledge_base(session, organization_id=org, name="bench").id
            for org in organizations
        }
        session.commit()
    return bases


def submit(
    env: Stack, items: Sequence[tuple[int, Any]], bases: dict[int, int], *, enqueue: bool = True
) -> list[int]:
    """Store ``(organization, Document)`` items in ``processing`` in one transaction, then
    enqueue their ingestion jobs; their document ids."""
    from services.ingestion import store
    from shared.db.engine import session_scope

    with session_scope(env.platform.sessions) as session:
        added = [
            (
                org,
                store.add_document(
                    session,
                    organization_id=org,
                    knowledge_base_id=bases[org],
                    name=doc.name,
                    source=store.FileSource(doc.data, doc.content_type, doc.filename),
                ).document.id,
            )
            for org, doc in items
        ]
        session.commit()
    if enqueue:
        enqueue_jobs(env, added, bases)
    return [doc_id for _, doc_id in added]


def enqueue_jobs(env: Stack, documents: Sequence[tuple[int, int]], bases: dict[int, int]) -> None:
    """Enqueue the ingestion jobs of ``(organization, document id)`` pairs."""
    from services.ingestion.families import ingest_request

    answers = env.platform.router.enqueue_many(
        [ingest_request(org, doc_id, bases[org]) for org, doc_id in documents]
    )
    if any(answer.outcome != "added" for answer in answers):
        raise RuntimeError(f"not every job was added: {answers[:3]}")


def statuses(env: Stack, ids: Sequence[int]) -> dict[int, str]:
    from sqlalchemy import select

    from shared.db.engine import session_scope
    from shared.db.models.ingestion import KbDocument

    with session_scope(env.platform.sessions) as session:
        rows = session.execute(
            select(KbDocument.id, KbDocument.status).where(KbDocument.id.in_(list(ids)))
        )
        return {doc_id: status for doc_id, status in rows}


def wait_settled(env: Stack, ids: Sequence[int], timeout: float, interval: float = 0.2) -> float:
    """Wait until no document of ``ids`` is processing; the time it was first seen so."""
    deadline = time.monotonic() + timeout
    while True:
        now = time.time()
        if "processing" not in statuses(env, ids).values():
            return now
        if time.monotonic() > deadline:
            raise TimeoutError(f"documents still processing after {timeout:.0f} s")
        time.sleep(interval)


def last_settle(env: Stack, ids: Sequence[int], seen: float) -> float:
    """When the last ingestion job of the documents ``ids`` settled: the latest
    ``finished_at`` of their job records (the settle, sent once a pass has committed), at
    most ``seen``, the time :func:`wait_settled` first saw them settled, which lags the last
    settle by up to its polling interval. ``seen`` when a record has no such time."""
    from services.ingestion.families import ingest_job_id

    jobs = env.platform.brokers.of_tier("fast").jobs
    pipe = jobs.client.pipeline(transaction=False)
    for doc_id in ids:
        pipe.hget(jobs.record_key(ingest_job_id(doc_id)), "finished_at")
    finished = pipe.execute()
    if not finished or any(value is None for value in finished):
        return seen
    return min(seen, max(int(value) for value in finished) / 1000)


def outcome(env: Stack, ids: Sequence[int], organizations: Sequence[int]) -> dict[str, Any]:
    """Ready and failed counts (with reasons), chunks and chunk tokens of the documents."""
    from sqlalchemy import func, select

    from shared.db.engine import session_scope
    from shared.db.models.ingestion import KbChunk, KbDocument

    with session_scope(env.platform.sessions) as session:
        rows = session.execute(
            select(KbDocument.status, KbDocument.failure_reason, func.count())
            .where(KbDocument.id.in_(list(ids)))
            .group_by(KbDocument.status, KbDocument.failure_reason)
        ).all()
        chunks, tokens = session.execute(
            select(func.count(), func.coalesce(func.sum(KbChunk.token_count), 0)).where(
                KbChunk.organization_id.in_(list(organizations))
            )
        ).one()
    ready = sum(n for status, _, n in rows if status == "ready")
    failures = {reason: n for status, reason, n in rows if status == "failed"}
    return {
        "ready": ready,
        "failed": failures,
        "chunks": int(chunks),
        "tokens": int(tokens),
    }
