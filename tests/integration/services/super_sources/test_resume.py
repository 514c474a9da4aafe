"""A real worker process SIGKILLed in the middle of an import: the next worker resumes the
walk from the persisted checkpoint, and every node ends up indexed once."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable
from datetime import UTC, datetime

import redis

from services.app.bootstrap import Platform
from services.connectors.nodes import NodeRef
from services.super_sources.families import import_request
from shared.db.engine import session_scope
from shared.db.models.ingestion import KbDocument
from shared.db.models.super_sources import SuperSourceImport, SuperSourceNode
from tests import platform_harness as h
from tests.integration.services.super_sources import tracker
from tests.integration.services.super_sources.conftest import make_connection

NODES, PAGE = 60, 5


def _spawn(platform: Platform) -> multiprocessing.process.BaseProcess:
    settings = platform.settings
    values = {
        "redis_url": settings.redis_url,
        "database_url": settings.database_url,
        "redis_namespace": settings.redis_namespace,
        "environment": "test",
        "flag_cache_seconds": 0,
        "group_lease_seconds": 1.0,
        "heartbeat_timeout_seconds": 2.0,
    }
    process = multiprocessing.get_context("spawn").Process(
        target=tracker.worker_main, args=(values, 2), daemon=True
    )
    process.start()
    return process


def _checkpoint(platform: Platform, org: int) -> int:
    with session_scope(platform.sessions) as session:
        state = session.query(SuperSourceImport).filter_by(organization_id=org).one_or_none()
        if state is None or state.checkpoint is None:
            return NODES if state is not None and state.completed_at is not None else 0
        return int(state.checkpoint)


def test_an_import_killed_mid_walk_resumes_from_its_checkpoint(
    super_platform: Platform,
    redis_client: redis.Redis,
    namespace: str,
    organization: Callable[[], int],
) -> None:
    # Given a 60-issue project walked 5 issues a page, 0.3 s a page
    org = organization()
    conn = make_connection(
        super_platform, org, "gitlab", settings={"page_size": PAGE, "page_sleep": 0.3}
    )
    root = NodeRef(tracker.ROOT_TYPE, f"k{org}")
    at = datetime(2026, 11, 1, tzinfo=UTC)
    tracker.put_nodes(
        redis_client,
        namespace,
        root.node_id,
        {f"{root.node_id}/{n}": (f"text {n}", at) for n in range(NODES)},
    )
    answer = super_platform.router.enqueue(import_request(org, "gitlab", conn, root))
    # When its worker process is SIGKILLed after a few pages
    victim = _spawn(super_platform)
    try:
        h.wait_until(lambda: _checkpoint(super_platform, org) >= 3 * PAGE, 60)
        os.kill(victim.pid, signal.SIGKILL)  # type: ignore[arg-type]
        victim.join(10)
    finally:
        if victim.is_alive():
            victim.kill()
    killed_at = _checkpoint(super_platform, org)
    assert killed_at < NODES
    walked_before = len(redis_client.lrange(f"{namespace}:tracker:walked:{root.node_id}", 0, -1))
    # and another worker takes over
    survivor = _spawn(super_platform)
    try:
        h.wait_until(lambda: h.state(super_platform.broker, answer.job_id) == "completed", 90)
        h.wait_until(lambda: _indexed(super_platform, org) == NODES, 60)
    finally:
        survivor.terminate()
        survivor.join(20)
        if survivor.is_alive():
            survivor.kill()
    # Then the walk went on from where it stopped: it started once, and the first page the
    # new worker asked for is at most one page before the checkpoint it found
    walked = [
        raw.decode()
        for raw in redis_client.lrange(f"{namespace}:tracker:walked:{root.node_id}", 0, -1)
    ]
    assert walked.count("start") == 1
    resumed = int(walked[walked_before])
    assert killed_at - PAGE <= resumed <= killed_at
    assert [int(cp) for cp in walked[walked_before:]] == list(range(resumed, NODES, PAGE))
    # and every node is indexed exactly once (one node row and one document each)
    with session_scope(super_platform.sessions) as session:
        assert session.query(KbDocument).filter_by(organization_id=org).count() == NODES
    counted = int(redis_client.hget(f"{namespace}:super:counters", "super.gitlab.indexation") or 0)
    assert counted <= NODES


def _indexed(platform: Platform, org: int) -> int:
    with session_scope(platform.sessions) as session:
        return session.query(SuperSourceNode).filter_by(organization_id=org).count()
