"""``python -m bench.connectors --kb``: Google Drive and SharePoint synced into knowledge
bases through the product, rate limits on.

For each of ``--orgs`` organizations: a knowledge base bound to a shared drive of
``--drive`` Google Docs and to a SharePoint document library of ``--sharepoint`` text files.
One Drive fake and one Graph fake serve every organization, each with its own token and a
rate limit **per token** (``--limit`` calls per ``--window`` seconds: Drive answers 403
``userRateLimitExceeded``, Graph 429 with Retry-After and RateLimit-* headers). The
bindings' syncs (``kb_connector_sync``, slow tier) run on ``--slow-processes`` worker
processes and the documents they land are ingested (``ingestion``, fast tier, one document
at a time per organization) on ``--fast-processes``; fresh database and Redis namespace.

Then ``--changes`` files per root are edited and every binding synced again: an incremental
pass (Drive's changes API, Graph's deltaLink) must re-land exactly those.

Reported (JSON): wall time to every document ready, documents per second, jobs (failed and
attempts spent must both be 0), sync deliveries delayed by rate limits, HTTP calls, the
incremental round (files re-landed, seconds), and the load average. Exit status 0 when every
document is ready, no job failed and no attempt was spent.

Quick (the default): 3 x (200 + 200) documents. The full size: ``--drive 5000
--sharepoint 5000`` (30,000 documents; plan for half an hour or more on a loaded 2-core
machine: ``--timeout 5400``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench.common import REDIS_URL, connect, delete_namespace, new_namespace
from bench.platform_workers import LoadSampler, settings_values, start_workers, stop_workers
from testkit.fakes.google_drive_server import GoogleDriveServer
from testkit.fakes.sharepoint_server import SharepointServer
from testkit.kb_report import job_records
from testkit.kb_workers import environment_of
from testkit.scenario_database import create_database, drop_database, server_database_url

#: A Fernet key for the bench's connection credentials (not a secret: a fresh database).
BENCH_KEY = "UBgHbXI5nYJJGDWukBTIbZ4mEG2n7BmuWqPvq1DKZZ8="
ORG_BASE = 9100


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--kb (knowledge-base connectors through the product)")
    group.add_argument("--slow-processes", type=int, default=2, help="sync workers")
    group.add_argument("--slow-threads", type=int, default=4)
    group.add_argument("--fast-processes", type=int, default=2, help="ingestion workers")
    group.add_argument("--fast-threads", type=int, default=4)


def _documents(platform: Any) -> dict[str, int]:
    with platform.engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT status, count(*) FROM api2.kb_documents "
                "WHERE deleted_at IS NULL GROUP BY status"
            )
        ).all()
    return {status: int(count) for status, count in rows}


def _bindings_done(platform: Any) -> bool:
    with platform.engine.connect() as connection:
        pending = connection.execute(
            text(
                "SELECT count(*) FROM api2.kb_connector_bindings "
                "WHERE last_synced_at IS NULL OR pass_started_at IS NOT NULL"
            )
        ).scalar_one()
    return int(pending) == 0


def _connector_versions(platform: Any) -> int:
    with platform.engine.connect() as connection:
        return int(
            connection.execute(
                text("SELECT count(*) FROM api2.kb_document_versions WHERE cause = 'connector'")
            ).scalar_one()
        )


def _wait(platform: Any, expected: int, versions: int, deadline: float) -> bool:
    """Until every binding finished its pass and every document is ready with ``versions``
    connector versions written; False at the deadline."""
    while time.time() < deadline:
        counts = _documents(platform)
        if (
            _bindings_done(platform)
            and counts.get("ready", 0) == expected
            and sum(counts.values()) == expected
            and _connector_versions(platform) >= versions
        ):
            return True
        time.sleep(2.0)
    return False


def run_kb(options: argparse.Namespace) -> dict[str, Any]:
    from services.app.bootstrap import bootstrap
    from services.ingestion import store
    from services.ingestion.families import sync_request
    from shared.config import load_settings
    from shared.credentials import CredentialBox
    from shared.db.engine import session_scope

    redis_url = options.redis_url or REDIS_URL
    client = connect(redis_url, "connectors-kb-bench")
    namespace = new_namespace("connectors-kb")
    server_url = server_database_url()
    database_url = create_database(server_url)
    log_dir = Path(tempfile.mkdtemp(prefix="bench-connectors-kb-"))
    orgs = range(1, options.orgs + 1)
    tokens = {org: (f"drive-{org}", f"graph-{org}") for org in orgs}
    drive = GoogleDriveServer(
        tokens[1][0],
        rate_limit=options.limit,
        rate_window=options.window,
        tokens=tuple(t[0] for t in tokens.values()),
    )
    graph = SharepointServer(
        tokens[1][1],
        rate_limit=options.limit,
        rate_window=options.window,
        tokens=tuple(t[1] for t in tokens.values()),
    )
    workers: list[Any] = []
    platform = None
    loads = LoadSampler()
    result: dict[str, Any] = {}
    try:
        drive.__enter__()
        graph.__enter__()
        values = {
            **settings_values(redis_url, database_url, namespace),
            "connector_credentials_key": BENCH_KEY,
            "provider_urls": {"google_drive": drive.base_url, "sharepoint": graph.base_url},
        }
        platform = bootstrap(load_settings(**values), component="bench")
        box = CredentialBox.from_setting(BENCH_KEY)
        built = time.perf_counter()
        requests: list[Any] = []
        files: dict[tuple[str, int], list[Any]] = {}
        for org in orgs:
            organization_id = ORG_BASE + org
            files[("drive", org)] = drive.populate(f"0Adrive{org}", files=options.drive)
            files[("graph", org)] = graph.populate(
                f"site-{org}", f"b!lib{org}", files=options.sharepoint
            )
            with session_scope(platform.sessions) as session:
                base = store.create_knowledge_base(
                    session, organization_id=organization_id, name="Drive and SharePoint"
                )
                for provider, token, settings in (
                    ("google_drive", tokens[org][0], {"drive_id": f"0Adrive{org}"}),
                    ("sharepoint", tokens[org][1], {"drive_id": f"b!lib{org}"}),
                ):
                    connection = store.create_connection(
                        session,
                        organization_id=organization_id,
                        provider=provider,
                        name=provider,
                        sealed=box.seal({"access_token": token}),
                        credential_fields=["access_token"],
                        settings={},
                    )
                    binding = store.create_binding(
                        session,
                        organization_id=organization_id,
                        knowledge_base_id=base.id,
                        connection_id=connection.id,
                        settings=settings,
                    )
                    requests.append(
                        sync_request(organization_id, binding.id, connection.id, provider)
                    )
                session.commit()
        build_seconds = time.perf_counter() - built
        expected = options.orgs * (options.drive + options.sharepoint)
        env = environment_of(values)
        workers = start_workers(
            env, options.slow_processes, options.slow_threads, log_dir, tier="slow"
        )
        workers += start_workers(
            env, options.fast_processes, options.fast_threads, log_dir, tier="fast"
        )
        loads.start()
        started = time.time()
        platform.router.enqueue_many(requests)
        settled = _wait(platform, expected, expected, started + options.timeout)
        wall = time.time() - started
        calls_full = len(drive.requests) + len(graph.requests)
        # the incremental round: edit --changes files per root, sync every binding again
        incremental: dict[str, Any] = {"edited": 0}
        if settled and options.changes:
            for (kind, _org), listed in files.items():
                server = drive if kind == "drive" else graph
                for item in listed[: options.changes]:
                    server.touch(item.id, f"{item.id} edited for the incremental round.")
                    incremental["edited"] += 1
            again = time.time()
            platform.router.enqueue_many(requests)
            settled = _wait(
                platform, expected, expected + incremental["edited"], again + options.timeout
            )
            incremental["seconds"] = round(time.time() - again, 1)
            incremental["re_landed"] = _connector_versions(platform) - expected
            incremental["http_calls"] = len(drive.requests) + len(graph.requests) - calls_full
        records = job_records(client, namespace)
        syncs = [
            client.hmget(key, "attempts", "finished_at")
            for key in client.scan_iter(match=f"{namespace}:job:kb-connector-sync-*", count=2000)
        ]
        counts = _documents(platform)
        result = {
            "route": "kb_connector_sync (slow tier) + ingestion (fast tier) on worker processes",
            "organizations": options.orgs,
            "documents_expected": expected,
            "documents": counts,
            "build_seconds": round(build_seconds, 1),
            "wall_seconds": round(wall, 1),
            "documents_per_second": round(expected / wall, 1),
            "limit": f"{options.limit} calls / {options.window} s per organization and source",
            "workers": {
                "slow": f"{options.slow_processes} x {options.slow_threads}",
                "fast": f"{options.fast_processes} x {options.fast_threads}",
            },
            "jobs": len(records),
            "jobs_failed": sum(1 for r in records.values() if r["state"] == "failed"),
            "attempts_spent": sum(int(r["failures"] or 0) for r in records.values()),
            # a delivery is a start: the first, and one after each delay (rate limits)
            "sync_job_deliveries": sum(int(attempts or 0) for attempts, _ in syncs),
            "sync_jobs": len(syncs),
            "http_calls_first_round": calls_full,
            "incremental": incremental,
            "settled": settled,
            "load_average": loads.summary(),
            "log_dir": str(log_dir),
        }
    finally:
        loads.stop()
        result["worker_exit_codes"] = stop_workers(workers)
        for server in (drive, graph):
            server.__exit__(None, None, None)
        if platform is not None:
            platform.close()
        drop_database(server_url, database_url)
        delete_namespace(client, namespace)
    return result


def kb_ok(report: dict[str, Any]) -> bool:
    expected = report.get("documents_expected")
    return bool(
        report.get("settled")
        and report.get("documents", {}).get("ready") == expected
        and report.get("jobs_failed") == 0
        and report.get("attempts_spent") == 0
    )
