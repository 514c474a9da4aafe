"""Prometheus metrics after real jobs: a ``speedtier worker`` pool of two processes runs
ticks, its metrics port sums both children's counts, and the API's ``/metrics`` reports the
enqueue latency and the queue depth read from Redis. Every line the pool writes in production
format is one JSON object."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from services.app.bootstrap import Platform
from shared import heartbeat
from testkit.ports import free_port
from tests.e2e.test_worker_pool import stop_everything, worker_children
from tests.fixtures_platform import AUTH, MakePlatform
from tests.platform_harness import wait_until

REPO = Path(__file__).resolve().parents[2]
FAMILY = "group_slot_reaper_tick"
JOBS = 7
POOL = [sys.executable, "-m", "services.app.cli", "worker", "--tier", "maintenance"]


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    """``(sample name, labels) -> value`` of an exposition text."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(parsed: Samples, name: str, **labels: str) -> float:
    return parsed.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def platform(make_platform: MakePlatform, tmp_path: Path) -> Platform:
    return make_platform(data_dir=str(tmp_path / "data"), component="test")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_counts_of_real_jobs_are_scraped_from_the_pool_and_the_api(
    platform: Platform,
    client: FlaskClient,
    redis_url: str,
    database_url: str,
    namespace: str,
    tmp_path: Path,
) -> None:
    # Given a maintenance pool of two worker processes, logging in production format
    port = free_port()
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_DATA_DIR": str(tmp_path / "data"),
        "SPEEDTIER_WORKER_POLL_MS": "100",
        "SPEEDTIER_WORKER_DRAIN_SECONDS": "5",
        "SPEEDTIER_METRICS_PORT": str(port),
        "SPEEDTIER_LOG_FORMAT": "json",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "PYTHONUNBUFFERED": "1",
        "TMPDIR": str(tmp_path / "tmp"),
    }
    (tmp_path / "tmp").mkdir()
    pool_beat = tmp_path / "tmp" / "speedtier-worker-maintenance.alive"
    (tmp_path / "metrics").mkdir()
    log_file = tmp_path / "pool.log"
    with log_file.open("w") as log:
        pool = subprocess.Popen(
            [*POOL, "--processes", "2", "--threads", "2"],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: len(worker_children(pool.pid)) == 2, timeout=60)
        # (the pool beats its liveness heartbeat once both children beat theirs)
        wait_until(lambda: heartbeat.is_recent(pool_beat, 5.0), timeout=60)
        children_beats = {p.name for p in (tmp_path / "tmp").glob("speedtier-worker-*.*.alive")}
        assert len(children_beats) == 2
        before = samples(client.get("/metrics").get_data(as_text=True))

        # When JOBS ticks are enqueued through the API, one request each
        for i in range(JOBS):
            answer = client.post(
                "/internal/jobs/enqueue",
                json={
                    "requests": [
                        {
                            "kind": "tick:group-slot-reaper",
                            "organization_id": None,
                            "slot": f"m-{i}",
                        }
                    ]
                },
                headers=AUTH,
            )
            assert answer.status_code == 202, answer.get_json()

        def all_completed() -> bool:
            records = [
                platform.broker.jobs.record(f"group-slot-reaper-tick-m-{i}") for i in range(JOBS)
            ]
            return all(r is not None and r["state"] == "completed" for r in records)

        wait_until(all_completed, timeout=60)

        # Then the pool's port sums its children: JOBS completed runs, JOBS timed runs
        def pool_counts() -> float:
            text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
            return value(
                samples(text),
                "speedtier_jobs_total",
                family=FAMILY,
                tier="maintenance",
                outcome="completed",
            )

        wait_until(lambda: pool_counts() == JOBS, timeout=30)
        scraped = samples(requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)
        # (the tier's live capacity: two processes of two threads)
        assert value(scraped, "speedtier_worker_threads", tier="maintenance") == 4
        assert (
            value(scraped, "speedtier_job_run_seconds_count", family=FAMILY, tier="maintenance")
            == JOBS
        )
        assert (
            value(
                scraped, "speedtier_jobs_total", family=FAMILY, tier="maintenance", outcome="failed"
            )
            == 0
        )
        # (the children's settle senders: at least one round trip carried the JOBS runs'
        # settles, each timed; every call answered once the jobs completed)
        tier = {"tier": "maintenance"}
        trips = value(scraped, "speedtier_settle_round_trip_seconds_count", **tier)
        assert 1 <= trips <= 2 * JOBS
        assert 0 < value(scraped, "speedtier_settle_round_trip_seconds_sum", **tier) < trips
        assert ("speedtier_settle_calls_unanswered", frozenset(tier.items())) in scraped
        assert value(scraped, "speedtier_settle_calls_unanswered", **tier) == 0

        # and the API's /metrics: JOBS more enqueue timings, and an empty maintenance queue
        after = samples(client.get("/metrics").get_data(as_text=True))
        route = "/internal/jobs/enqueue"
        timed = value(after, "speedtier_enqueue_seconds_count", route=route)
        assert timed - value(before, "speedtier_enqueue_seconds_count", route=route) == JOBS
        assert value(after, "speedtier_queue_depth_up") == 1
        assert value(after, "speedtier_postgresql_up") == 1
        due = value(after, "speedtier_tick_due_timestamp_seconds", tick="group-slot-reaper")
        assert 0 < time.time() - due < 24 * 3600
        assert (
            "speedtier_queue_depth",
            frozenset({"tier": "maintenance", "family": FAMILY, "state": "ready"}.items()),
        ) in after
        assert (
            value(after, "speedtier_queue_depth", tier="maintenance", family=FAMILY, state="ready")
            == 0
        )

        pool.send_signal(signal.SIGTERM)
        assert pool.wait(timeout=60) == 0
        assert not pool_beat.exists()  # a stopped pool leaves no heartbeat behind
    finally:
        stop_everything(pool)  # type: ignore[arg-type]

    # and every line the pool and its children wrote is one JSON object with a level
    lines = [line for line in log_file.read_text().splitlines() if line.strip()]
    assert lines
    for line in lines:
        entry = json.loads(line)
        assert {"time", "level", "logger", "message"} <= entry.keys()
