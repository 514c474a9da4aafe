"""A worker pool is live only while every child runs and beats: a child that hangs (SIGSTOP:
alive to the OS, doing nothing) stops the pool's heartbeat, so ``speedtier alive`` fails and
Kubernetes would restart the pod; once the child runs again, so does the heartbeat."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.app.bootstrap import Platform
from shared import heartbeat
from tests.e2e.test_worker_pool import stop_everything, worker_children
from tests.fixtures_platform import MakePlatform
from tests.platform_harness import wait_until

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def platform(make_platform: MakePlatform, tmp_path: Path) -> Platform:
    return make_platform(data_dir=str(tmp_path / "data"), component="test")


def alive(env: dict[str, str], max_age: float) -> int:
    command = [sys.executable, "-m", "services.app.cli", "alive", "worker-maintenance"]
    return subprocess.run(
        [*command, "--max-age", str(max_age)], env=env, cwd=REPO, capture_output=True, check=False
    ).returncode


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_hung_child_makes_the_pool_not_live(
    platform: Platform, redis_url: str, database_url: str, namespace: str, tmp_path: Path
) -> None:
    beats = tmp_path / "tmp"
    beats.mkdir()
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_DATA_DIR": str(tmp_path / "data"),
        "SPEEDTIER_WORKER_DRAIN_SECONDS": "5",
        "SPEEDTIER_METRICS_PORT": "0",
        "TMPDIR": str(beats),
    }
    pool_beat = beats / "speedtier-worker-maintenance.alive"
    command = [sys.executable, "-m", "services.app.cli", "worker", "--tier", "maintenance"]
    pool = subprocess.Popen(
        [*command, "--processes", "2", "--threads", "1"],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    hung: int | None = None
    try:
        # Given a pool whose two children beat, so the pool beats
        wait_until(lambda: len(worker_children(pool.pid)) == 2, timeout=60)
        wait_until(lambda: heartbeat.is_recent(pool_beat, 2.0), timeout=60)
        assert alive(env, 10) == 0
        # When one child hangs
        hung = min(worker_children(pool.pid))
        os.kill(hung, signal.SIGSTOP)
        stopped = time.time()
        # Then its heartbeat ages, the pool stops beating, and liveness fails
        wait_until(lambda: not heartbeat.is_recent(pool_beat, 5.0), timeout=60)
        assert pool_beat.stat().st_mtime < stopped + 3 * heartbeat.BEAT_SECONDS + 1
        assert alive(env, 5) == 1
        # When it runs again, the pool beats again
        os.kill(hung, signal.SIGCONT)
        hung = None
        resumed = time.time()
        wait_until(lambda: pool_beat.stat().st_mtime > resumed, timeout=60)
        assert alive(env, 5) == 0
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(timeout=60) == 0
    finally:
        if hung is not None:
            os.kill(hung, signal.SIGCONT)
        stop_everything(pool)  # type: ignore[arg-type]
