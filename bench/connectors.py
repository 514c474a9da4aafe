"""Google Drive and SharePoint connectors at 5,000 items a root, rate limits on (the connector
walk alone: no database, no Dramatiq workers).

``python -m bench.connectors`` builds, for each of ``--orgs`` organizations, a My Drive of
``--drive`` Google Docs on its own Drive fake and a SharePoint document library of
``--sharepoint`` text files on its own Graph fake (``testkit/fakes``). Each fake enforces a
rate limit (``--limit`` calls per ``--window`` seconds per organization: Drive answers 403
``userRateLimitExceeded``, Graph 429 with Retry-After and RateLimit-* headers near the
limit). For each (organization, source) a thread walks the root (every page) and then
``--threads`` threads fetch every node, as the slow tier's import and index families would
(import concurrency 1, index concurrency 2 per organization). Every call first asks the
connection's :class:`RateLimitState` in Redis (``blocked_until``), as the product does, and a
``Delay`` waits until its end without spending an attempt; a ``Retryable`` is retried (at
most ``--attempts``); anything else is a failed job. Then ``--changes`` nodes per root are
edited and an incremental walk (Drive changes API, Graph deltaLink) must list exactly them.

Reported (JSON): wall time, nodes/s, HTTP calls, delays, retries, failed jobs (must be 0),
incremental walk results, the load average before/after and its highest one-minute sample.

``--product`` runs the same data sets through the product instead: the super-sources import
and index families on real slow-tier worker processes (``bench.platform_workers --tier
slow``), a fresh database and Redis namespace, every root's first import enqueued at once;
it reports node rows against the expected count, jobs failed and attempts spent (both must
be 0), jobs delayed by the rate limits, and the load average.

``--kb`` runs them into knowledge bases instead: connector bindings synced by the
``kb_connector_sync`` family and their documents ingested (``bench/connectors_kb.py``); its
default size is a quick 200 + 200 per organization.

Quick: ``python -m bench.connectors --drive 200 --sharepoint 200`` (``--product`` too).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import redis

from bench import connectors_kb
from bench.common import allow_loopback_providers
from services.connectors import google_drive, sharepoint
from services.connectors.nodes import Connection, Node, NodeRef, NodeSource, RateLimitState
from shared.errors import Delay, Retryable
from testkit.fakes.google_drive_server import MY_DRIVE, GoogleDriveServer
from testkit.fakes.protocol_server import ProtocolServer
from testkit.fakes.sharepoint_server import SharepointServer

T = TypeVar("T")


class Stats:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.failures: list[str] = []

    def add(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n


def _call(
    conn: Connection, state: RateLimitState, stats: Stats, attempts: int, step: Callable[[], T]
) -> T:
    """One job's provider call as the product makes it: wait out a recorded block, wait out
    a Delay (no attempt spent), retry a Retryable."""
    spent = 0
    while True:
        until = state.blocked_until(conn)
        if until is not None:
            stats.add(f"{conn.source}.paced")
            time.sleep(max(0.0, until.timestamp() - time.time()))
        try:
            return step()
        except Delay as delay:
            stats.add(f"{conn.source}.delays")
            time.sleep(max(0.0, min(delay.until - time.time(), 120.0)))
        except Retryable:
            spent += 1
            stats.add(f"{conn.source}.retries")
            if spent >= attempts:
                raise
            time.sleep(0.2 * spent)


def _sync(
    source: NodeSource,
    conn: Connection,
    root: NodeRef,
    state: RateLimitState,
    stats: Stats,
    options: argparse.Namespace,
) -> tuple[list[NodeRef], str | None]:
    refs: list[NodeRef] = []
    checkpoint: str | None = None
    watermark: str | None = None
    while True:
        page = _call(
            conn,
            state,
            stats,
            options.attempts,
            functools.partial(source.walk, conn, root, checkpoint),
        )
        refs += page.refs
        checkpoint, watermark = page.checkpoint, page.watermark
        if checkpoint is None:
            break

    def index(ref: NodeRef) -> Node | None:
        try:
            node = _call(conn, state, stats, options.attempts, lambda: source.fetch(conn, ref))
        except Exception as exc:  # a failed job: counted, reported
            with stats.lock:
                stats.failures.append(f"{conn.source} {ref.node_id}: {exc!r}")
            return None
        stats.add(f"{conn.source}.indexed" if node is not None else f"{conn.source}.gone")
        return node

    with ThreadPoolExecutor(options.threads) as pool:
        list(pool.map(index, refs))
    return refs, watermark


def _editing(server: Any, files: list[Any], count: int) -> Callable[[Any], object]:
    """The change a sync's second walk reads: ``server`` edits the first ``count`` files."""
    return lambda _refs: [server.touch(f.id, "edited") for f in files[:count]]


def _load() -> float:
    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.connectors", description=__doc__)
    parser.add_argument("--orgs", type=int, default=3)
    parser.add_argument(
        "--drive", type=int, default=None, help="Google Docs per organization (5000; --kb: 200)"
    )
    parser.add_argument(
        "--sharepoint", type=int, default=None, help="files per organization (5000; --kb: 200)"
    )
    parser.add_argument("--limit", type=int, default=60, help="calls per window per fake")
    parser.add_argument("--window", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=2, help="index threads per root")
    parser.add_argument("--attempts", type=int, default=5)
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--product", action="store_true", help="through real workers")
    parser.add_argument(
        "--kb", action="store_true", help="into knowledge bases, through real workers"
    )
    parser.add_argument("--processes", type=int, default=2, help="slow-tier workers")
    parser.add_argument("--worker-threads", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument(
        "--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    connectors_kb.add_arguments(parser)
    options = parser.parse_args(argv)
    small = 200 if options.kb else 5000
    options.drive = small if options.drive is None else options.drive
    options.sharepoint = small if options.sharepoint is None else options.sharepoint
    if options.kb:
        report = connectors_kb.run_kb(options)
        print(json.dumps(report, indent=2))
        return 0 if connectors_kb.kb_ok(report) else 1
    if options.product:
        report = _product(options)
        print(json.dumps(report, indent=2))
        ok = (
            not report["stalled"]
            and report["node_rows"] == report["nodes_expected"]
            and report["jobs_failed"] == 0
            and report["attempts_spent"] == 0
        )
        return 0 if ok else 1

    allow_loopback_providers()  # the connectors walk in this process
    client = redis.Redis.from_url(options.redis_url)
    namespace = f"bench-connectors-{uuid.uuid4().hex[:8]}"
    state = RateLimitState(client, namespace)
    stats = Stats()
    servers: list[ProtocolServer] = []
    jobs: list[tuple[NodeSource, Connection, NodeRef, Callable[[list[NodeRef]], None]]] = []
    load_before = _load()
    built = time.perf_counter()
    for org in range(1, options.orgs + 1):
        drive = GoogleDriveServer(
            f"drive-{org}", rate_limit=options.limit, rate_window=options.window
        )
        graph = SharepointServer(
            f"graph-{org}", rate_limit=options.limit, rate_window=options.window
        )
        for server in (drive, graph):
            server.__enter__()
            servers.append(server)
        drive_files = drive.populate(MY_DRIVE, files=options.drive)
        graph_files = graph.populate(f"site-{org}", f"b!drive{org}", files=options.sharepoint)
        common = {"organization_id": org, "timeout": 10.0, "rate_limits": state}
        jobs.append(
            (
                google_drive.SOURCE,
                Connection(
                    source="google_drive",
                    connection_id=100 + org,
                    base_url=drive.base_url,
                    credentials={"access_token": f"drive-{org}"},
                    settings={"rate_limit_wait": options.window},
                    **common,  # type: ignore[arg-type]
                ),
                NodeRef(google_drive.DRIVE, MY_DRIVE),
                _editing(drive, drive_files, options.changes),
            )
        )
        jobs.append(
            (
                sharepoint.SOURCE,
                Connection(
                    source="sharepoint",
                    connection_id=200 + org,
                    base_url=graph.base_url,
                    credentials={"access_token": f"graph-{org}"},
                    settings={"sites": [f"site-{org}"]},
                    **common,  # type: ignore[arg-type]
                ),
                NodeRef(sharepoint.DRIVE, f"b!drive{org}"),
                _editing(graph, graph_files, options.changes),
            )
        )
    build_seconds = time.perf_counter() - built

    highest = [load_before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(5.0):
            highest.append(_load())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    results: dict[tuple[str, int], tuple[list[NodeRef], str | None]] = {}
    started = time.perf_counter()

    def run(job: tuple[NodeSource, Connection, NodeRef, Any]) -> None:
        source, conn, root, _ = job
        results[(conn.source, conn.organization_id)] = _sync(
            source, conn, root, state, stats, options
        )

    try:
        with ThreadPoolExecutor(len(jobs)) as pool:
            list(pool.map(run, jobs))
        wall = time.perf_counter() - started
        incremental: dict[str, Any] = {}
        for source, conn, root, change in jobs:
            refs, watermark = results[(conn.source, conn.organization_id)]
            change(refs)
            again = _call(
                conn,
                state,
                stats,
                options.attempts,
                functools.partial(source.walk, conn, root, None, watermark),
            )
            changed = list(again.refs)
            while again.checkpoint is not None:
                again = source.walk(conn, root, again.checkpoint)
                changed += again.refs
            incremental[f"{conn.source}/org{conn.organization_id}"] = len(changed)
    finally:
        done.set()
        calls = sum(len(s.requests) for s in servers)
        for running in servers:
            running.__exit__(None, None, None)
        for key in client.scan_iter(f"{namespace}:*"):
            client.delete(key)
    nodes = sum(len(refs) for refs, _ in results.values())
    report = {
        "orgs": options.orgs,
        "drive_files_per_org": options.drive,
        "sharepoint_items_per_org": options.sharepoint,
        "limit": f"{options.limit} calls / {options.window} s per organization and source",
        "build_seconds": round(build_seconds, 2),
        "wall_seconds": round(wall, 1),
        "nodes": nodes,
        "nodes_per_second": round(nodes / wall, 1),
        "http_calls": calls,
        "counts": dict(sorted(stats.counts.items())),
        "failed_jobs": len(stats.failures),
        "failures_sample": stats.failures[:5],
        "incremental_walk_refs": incremental,
        "load_average": {
            "before": round(load_before, 2),
            "after": round(_load(), 2),
            "highest_sample": round(max(highest), 2),
        },
    }
    print(json.dumps(report, indent=2))
    expected = options.orgs * (options.drive + options.sharepoint)
    ok = (
        not stats.failures
        and nodes == expected
        and sum(stats.counts[f"{s}.indexed"] for s in ("google_drive", "sharepoint")) == expected
        and all(n == options.changes for n in incremental.values())
    )
    return 0 if ok else 1


def _product(options: argparse.Namespace) -> dict[str, Any]:
    import tempfile
    from pathlib import Path

    from bench.common import REDIS_URL, connect, delete_namespace, new_namespace
    from bench.platform_workers import LoadSampler, settings_values, start_workers, stop_workers
    from bench.super_sources_checks import NODE_ROWS, live_jobs, row_count
    from services.app.bootstrap import bootstrap
    from services.super_sources import store
    from services.super_sources.families import import_request
    from shared.config import load_settings
    from shared.credentials import CredentialBox
    from shared.db.engine import session_scope
    from testkit.kb_report import job_records
    from testkit.kb_workers import environment_of
    from testkit.scenario_database import create_database, drop_database, server_database_url

    redis_url = options.redis_url or REDIS_URL
    client = connect(redis_url, "connectors-bench")
    namespace = new_namespace("connectors")
    server_url = server_database_url()
    database_url = create_database(server_url)
    log_dir = Path(tempfile.mkdtemp(prefix="bench-connectors-"))
    servers: list[ProtocolServer] = []
    workers: list[Any] = []
    platform = None
    loads = LoadSampler()
    result: dict[str, Any] = {}
    try:
        values = settings_values(redis_url, database_url, namespace)
        box = CredentialBox.from_setting(values["connector_credentials_key"])
        platform = bootstrap(load_settings(**values), component="bench")
        roots = []
        for org in range(1, options.orgs + 1):
            drive = GoogleDriveServer(
                f"d{org}", rate_limit=options.limit, rate_window=options.window
            )
            graph = SharepointServer(
                f"g{org}", rate_limit=options.limit, rate_window=options.window
            )
            for server in (drive, graph):
                server.__enter__()
                servers.append(server)
            drive.populate(MY_DRIVE, files=options.drive)
            graph.populate(f"site-{org}", f"b!drive{org}", files=options.sharepoint)
            with session_scope(platform.sessions) as session:
                gd = store.create_connection(
                    session,
                    8000 + org,
                    "google_drive",
                    box=box,
                    credentials={"access_token": f"d{org}"},
                    base_url=drive.base_url,
                    settings={"rate_limit_wait": options.window},
                )
                sp = store.create_connection(
                    session,
                    8000 + org,
                    "sharepoint",
                    box=box,
                    credentials={"access_token": f"g{org}"},
                    base_url=graph.base_url,
                )
                session.commit()
                gd_id, sp_id = gd.id, sp.id
            roots.append(
                import_request(
                    8000 + org,
                    "google_drive",
                    gd_id,
                    NodeRef(google_drive.DRIVE, MY_DRIVE),
                    first_run=True,
                )
            )
            roots.append(
                import_request(
                    8000 + org,
                    "sharepoint",
                    sp_id,
                    NodeRef(sharepoint.DRIVE, f"b!drive{org}"),
                    first_run=True,
                )
            )
        expected = options.orgs * (options.drive + options.sharepoint)
        workers = start_workers(
            environment_of(values),
            options.processes,
            options.worker_threads,
            log_dir,
            tier="slow",
        )
        loads.start()
        started = time.time()
        answers = platform.router.enqueue_many(roots)
        deadline = started + options.timeout
        while time.time() < deadline:
            done = all(
                (platform.broker.jobs.record(a.job_id) or {}).get("state") == "completed"
                for a in answers
            )
            if (
                done
                and row_count(platform, NODE_ROWS) >= expected
                and not live_jobs(client, namespace)
            ):
                break
            time.sleep(1.0)
        wall = time.time() - started
        records = job_records(client, namespace)
        delays = sum(
            1
            for key in client.scan_iter(match=f"{namespace}:job:*", count=2000)
            if b"rate-limit" in (client.hget(key, "last_delay") or b"")
        )
        result = {
            "route": "super_import/super_index families on slow-tier worker processes",
            "organizations": options.orgs,
            "nodes_expected": expected,
            "node_rows": row_count(platform, NODE_ROWS),
            "wall_seconds": round(wall, 1),
            "nodes_per_second": round(expected / wall, 1),
            "limit": f"{options.limit} calls / {options.window} s per organization and source",
            "workers": f"{options.processes} processes x {options.worker_threads} threads",
            "jobs": len(records),
            "jobs_failed": sum(1 for r in records.values() if r["state"] == "failed"),
            "attempts_spent": sum(int(r["failures"] or 0) for r in records.values()),
            "jobs_delayed_by_rate_limits": delays,
            "http_calls": sum(len(s.requests) for s in servers),
            "stalled": time.time() >= deadline,
            "load_average": loads.summary(),
            "log_dir": str(log_dir),
        }
    finally:
        loads.stop()
        result["worker_exit_codes"] = stop_workers(workers)
        for running in servers:
            running.__exit__(None, None, None)
        if platform is not None:
            platform.close()
        drop_database(server_url, database_url)
        delete_namespace(client, namespace)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
