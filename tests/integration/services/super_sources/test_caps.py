"""Concurrency per tier under load: imports one at a time per organization, index jobs 5
(fast) and 2 (slow) per organization, webhooks 5 and 2 per tier whatever the organization;
``speedtier super status`` shows who is running and parked."""

from __future__ import annotations

import hashlib
import multiprocessing
import time
from collections.abc import Callable
from datetime import UTC, datetime

import redis
from click.testing import CliRunner

from services.app.bootstrap import Platform
from services.connectors.nodes import NodeRef
from services.super_sources.cli import super_group
from services.super_sources.families import import_request, index_request
from services.super_sources.queue_status import queue_status
from tests import platform_harness as h
from tests.integration.services.super_sources import tracker
from tests.integration.services.super_sources.conftest import make_connection, workers

T0 = datetime(2026, 11, 1, tzinfo=UTC)
SOURCES = ("gitlab", "acme")  # fast, slow


def _seed(client: redis.Redis, namespace: str, root: str, count: int) -> list[NodeRef]:
    tracker.put_nodes(
        client, namespace, root, {f"{root}/{n}": (f"text {n}", T0) for n in range(count)}
    )
    return [NodeRef(tracker.NODE_TYPE, f"{root}/{n}") for n in range(count)]


def test_index_jobs_run_five_per_organization_fast_and_two_slow(
    super_platform: Platform,
    redis_client: redis.Redis,
    namespace: str,
    organization: Callable[[], int],
) -> None:
    # Given three organizations with 12 nodes in a fast source and 6 in a slow one each,
    # every fetch taking 0.3 s
    orgs = [organization() for _ in range(3)]
    requests, job_ids = [], []
    for org in orgs:
        for source, count in zip(SOURCES, (12, 6), strict=True):
            conn = make_connection(super_platform, org, source, settings={"fetch_sleep": 0.3})
            root = NodeRef(tracker.ROOT_TYPE, f"{source}{org}")
            for ref in _seed(redis_client, namespace, root.node_id, count):
                requests.append(index_request(org, source, conn, root, ref))
    answers = super_platform.router.enqueue_many(requests)
    job_ids = [a.job_id for a in answers]
    # Then before any worker runs, each group holds its cap and parks the rest
    status = {row.queue: row for row in queue_status(super_platform.broker)}
    for org in orgs:
        assert status["super_index.fast"].groups[str(org)] == (5, 7)
        assert status["super_index.slow"].groups[str(org)] == (2, 4)
    # When a worker with far more threads than the caps runs them all
    with workers(super_platform, threads=24):
        h.wait_until(
            lambda: all(h.state(super_platform.broker, j) == "completed" for j in job_ids), 60
        )
    # Then no organization ever ran more than its tier's cap, and each reached it
    for org in orgs:
        assert tracker.max_active(redis_client, namespace, f"gitlab:{org}") == 5
        assert tracker.max_active(redis_client, namespace, f"acme:{org}") == 2


def test_imports_run_one_at_a_time_per_organization_on_each_tier(
    super_platform: Platform,
    redis_client: redis.Redis,
    namespace: str,
    organization: Callable[[], int],
) -> None:
    # Given two organizations with three roots each in a fast and a slow source
    orgs = [organization() for _ in range(2)]
    requests = []
    for org in orgs:
        for source in SOURCES:
            conn = make_connection(
                super_platform, org, source, settings={"page_sleep": 0.2, "page_size": 2}
            )
            for n in range(3):
                root = NodeRef(tracker.ROOT_TYPE, f"{source}{org}r{n}")
                _seed(redis_client, namespace, root.node_id, 3)
                requests.append(import_request(org, source, conn, root))
    answers = super_platform.router.enqueue_many(requests)
    # When they all run with plenty of threads
    with workers(super_platform, threads=16):
        h.wait_until(
            lambda: all(h.state(super_platform.broker, a.job_id) == "completed" for a in answers),
            60,
        )
    # Then each organization walked one root at a time per tier
    for org in orgs:
        for source in SOURCES:
            assert tracker.max_active(redis_client, namespace, f"import:{source}:{org}") == 1


def test_webhooks_run_five_fast_and_two_slow_whatever_the_organization(
    super_platform: Platform,
    redis_client: redis.Redis,
    namespace: str,
    organization: Callable[[], int],
) -> None:
    # Given deliveries from three organizations to a fast and a slow source, each taking
    # 0.3 s in its processor
    requests = []
    for org in (organization() for _ in range(3)):
        for source in SOURCES:
            conn = make_connection(super_platform, org, source, settings={"webhook_sleep": 0.3})
            for n in range(6):
                requests.append(_webhook_request(org, source, conn, f"{org}-{n}"))
    answers = super_platform.router.enqueue_many(requests)
    assert {a.queue for a in answers} == {"super_webhook.fast", "super_webhook.slow"}
    with workers(super_platform, threads=24):
        h.wait_until(
            lambda: all(h.state(super_platform.broker, a.job_id) == "completed" for a in answers),
            60,
        )
    # Then the fast tier ran at most (and reached) 5 at once, the slow one 2, all
    # organizations together
    assert tracker.max_active(redis_client, namespace, "webhook:gitlab") == 5
    assert tracker.max_active(redis_client, namespace, "webhook:acme") == 2


def _webhook_request(org: int, source: str, conn: int, delivery: str) -> object:
    from router.requests import JobRequest

    return JobRequest(
        "super_webhook",
        org,
        {
            "source": source,
            "path": "slow",
            "connection_id": conn,
            "delivery_id": delivery,
            "refs": [],
            "received_at": time.time(),
        },
    )


def test_the_status_command_lists_the_six_queues(
    super_platform: Platform, organization: Callable[[], int]
) -> None:
    org = organization()
    super_platform.router.enqueue_many(
        [
            index_request(org, "acme", 1, NodeRef("R", "r"), NodeRef(tracker.NODE_TYPE, f"r/{n}"))
            for n in range(3)
        ]
    )
    result = CliRunner().invoke(super_group, ["status"], obj=lambda: super_platform)
    assert result.exit_code == 0, result.output
    queues = [line.split()[0] for line in result.output.splitlines() if not line.startswith(" ")]
    assert queues == [
        f"super_{family}.{tier}"
        for family in ("import", "index", "webhook")
        for tier in ("fast", "slow")
    ]
    assert f"organization {org}: running=2 parked=1" in result.output


def test_the_import_command_re_drives_one_root(
    super_platform: Platform, organization: Callable[[], int]
) -> None:
    org = organization()
    conn = make_connection(super_platform, org, "github")
    runner = CliRunner()
    result = runner.invoke(
        super_group, ["import", "github", str(conn), "octo/hello"], obj=lambda: super_platform
    )
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (
        f"super-import-{org}-{conn}-GithubRepo:h{hashlib.sha256(b'octo/hello').hexdigest()[:32]}: "
        "added on super_import.fast"
    )
    again = runner.invoke(
        super_group,
        ["import", "github", str(conn), "GithubRepo:octo/hello", "--first-run"],
        obj=lambda: super_platform,
    )
    assert again.exit_code == 0 and "deduplicated" in again.output
    for bad, message in (
        (["import", "nosuch", str(conn), "x"], "unknown source 'nosuch'"),
        (
            ["import", "github", str(conn + 1000), "octo/hello"],
            f"no github connection {conn + 1000}",
        ),
    ):
        refused = runner.invoke(super_group, bad, obj=lambda: super_platform)
        assert refused.exit_code != 0 and message in refused.output


def test_the_webhook_caps_hold_across_worker_processes(
    super_platform: Platform,
    redis_client: redis.Redis,
    namespace: str,
    organization: Callable[[], int],
) -> None:
    """The cap is per tier, not per worker process (BullMQ's worker ``concurrency``): with
    two worker processes of 8 threads each, the slow tier still runs at most 2 webhook
    processors at once and the fast tier 5 (the reading ``docs/products/cutover.md``
    argues for: a per-process cap would double with each replica)."""
    requests = []
    for org in (organization() for _ in range(2)):
        for source in SOURCES:
            conn = make_connection(super_platform, org, source, settings={"webhook_sleep": 0.3})
            for n in range(8):
                requests.append(_webhook_request(org, source, conn, f"p{org}-{n}"))
    answers = super_platform.router.enqueue_many(requests)
    processes = [_spawn(super_platform) for _ in range(2)]
    try:
        h.wait_until(
            lambda: all(h.state(super_platform.broker, a.job_id) == "completed" for a in answers),
            90,
        )
    finally:
        for process in processes:
            process.terminate()
            process.join(20)
    assert tracker.max_active(redis_client, namespace, "webhook:gitlab") == 5
    assert tracker.max_active(redis_client, namespace, "webhook:acme") == 2


def _spawn(platform: Platform) -> multiprocessing.process.BaseProcess:
    settings = platform.settings
    values = {
        "redis_url": settings.redis_url,
        "database_url": settings.database_url,
        "redis_namespace": settings.redis_namespace,
        "environment": "test",
        "flag_cache_seconds": 0,
    }
    process = multiprocessing.get_context("spawn").Process(
        target=tracker.worker_main, args=(values, 8), daemon=True
    )
    process.start()
    return process
