"""Google Drive and SharePoint connectors at issue 14's size, rate limits on (the connector
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

Quick: ``python -m bench.connectors --drive 200 --sharepoint 200``.
"""

from __future__ import annotations

import argparse
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
            lambda at=checkpoint: source.walk(conn, root, at),
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


def _load() -> float:
    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.connectors", description=__doc__)
    parser.add_argument("--orgs", type=int, default=3)
    parser.add_argument("--drive", type=int, default=5000, help="Google Docs per organization")
    parser.add_argument("--sharepoint", type=int, default=5000, help="files per organization")
    parser.add_argument("--limit", type=int, default=60, help="calls per window per fake")
    parser.add_argument("--window", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=2, help="index threads per root")
    parser.add_argument("--attempts", type=int, default=5)
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument(
        "--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    options = parser.parse_args(argv)

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
                lambda _refs, d=drive, files=drive_files: [
                    d.touch(f.id, "edited") for f in files[: options.changes]
                ],
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
                lambda _refs, g=graph, files=graph_files: [
                    g.touch(f.id, "edited") for f in files[: options.changes]
                ],
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
                lambda s=source, c=conn, r=root, w=watermark: s.walk(c, r, None, w),
            )
            changed = list(again.refs)
            while again.checkpoint is not None:
                again = source.walk(conn, root, again.checkpoint)
                changed += again.refs
            incremental[f"{conn.source}/org{conn.organization_id}"] = len(changed)
    finally:
        done.set()
        calls = sum(len(s.requests) for s in servers)
        for server in servers:
            server.__exit__(None, None, None)
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


if __name__ == "__main__":
    raise SystemExit(main())
