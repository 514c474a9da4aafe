"""Liveness is the process's own heartbeat, readiness its dependencies: a worker whose
consumer thread died stops beating (not live), and a Redis outage makes a worker unready
while it keeps beating (still live)."""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from dramatiq.worker import _ConsumerThread

from services.app.cli import main
from services.app.embedded.redis_server import start_embedded_redis
from services.app.readiness import check_readiness, is_ready
from shared import heartbeat
from shared.config import load_settings
from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.worker import serve

BEAT = 0.1


@pytest.fixture
def heartbeats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Heartbeat files in this test's own directory (``speedtier alive`` reads them there)."""
    directory = tmp_path / "beats"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    return directory


def serving(broker: TierBroker, beat_file: Path) -> tuple[threading.Thread, threading.Event]:
    stop = threading.Event()
    queues = [q for f in h.families().values() for q in f.queues()]
    thread = threading.Thread(
        target=serve,
        args=(broker, queues),
        kwargs={
            "threads": 2,
            "stop": stop,
            "poll_ms": 50,
            "drain_seconds": 2,
            "on_beat": lambda: heartbeat.beat(beat_file),
            "beat_seconds": BEAT,
        },
        daemon=True,
    )
    thread.start()
    return thread, stop


def alive(component: str, max_age: float) -> int:
    return CliRunner().invoke(main, ["alive", component, "--max-age", str(max_age)]).exit_code


def beats_after(path: Path, moment: float) -> bool:
    return path.exists() and path.stat().st_mtime > moment


@pytest.fixture
def broker(redis_url: str, namespace: str) -> Iterator[TierBroker]:
    broker = h.make_broker(redis_url, namespace)
    yield broker
    broker.close()


def test_a_worker_whose_consumer_thread_died_is_not_live(
    broker: TierBroker, heartbeats: Path
) -> None:
    # Given a worker beating its heartbeat file
    beat_file = heartbeat.heartbeat_path("worker-fast")
    assert beat_file.parent == heartbeats
    thread, stop = serving(broker, beat_file)
    try:
        h.wait_until(lambda: beats_after(beat_file, 0), timeout=15)
        assert alive("worker-fast", 1) == 0
        # When one of its consumer threads dies
        consumers = [t for t in threading.enumerate() if isinstance(t, _ConsumerThread)]
        assert consumers
        consumers[0].stop()
        consumers[0].join(timeout=10)
        assert not consumers[0].is_alive()
        # Then the heartbeat stops, and the liveness probe fails once it is older than allowed
        died = time.time()
        h.wait_until(lambda: not heartbeat.is_recent(beat_file, 1.0), timeout=15)
        assert beat_file.stat().st_mtime <= died + BEAT * 2
        assert alive("worker-fast", 1) == 1
    finally:
        stop.set()
        thread.join(timeout=20)


def test_a_redis_outage_makes_a_worker_unready_but_not_dead(
    tmp_path: Path, heartbeats: Path, database_url: str, namespace: str
) -> None:
    # Given a worker on its own Redis, ready and beating
    server = start_embedded_redis(tmp_path / "redis", port=0)  # not 16379: others may use it
    broker = h.make_broker(server.url, namespace)
    beat_file = heartbeat.heartbeat_path("worker-fast")
    thread, stop = serving(broker, beat_file)
    settings = load_settings(redis_url=server.url, database_url=database_url)
    try:
        h.wait_until(lambda: beats_after(beat_file, 0), timeout=15)
        assert is_ready(check_readiness(settings, timeout=1))
        # When Redis goes away
        server.crash()
        down = time.time()
        # Then readiness fails on Redis (PostgreSQL still answers)
        checks = check_readiness(settings, timeout=1)
        assert checks["redis"] is not None and checks["postgresql"] is None
        assert not is_ready(checks)
        # but the worker keeps beating through the outage (beats more than 1 and 2 s into it,
        # every consumer thread still retrying): it is alive, not to be restarted. The probe
        # allows 5 s: on a loaded machine a GIL-bound thread can miss a 0.1 s beat by a second.
        h.wait_until(lambda: beats_after(beat_file, down + 1.0), timeout=15)
        h.wait_until(lambda: beats_after(beat_file, down + 2.0), timeout=15)
        assert alive("worker-fast", 5) == 0
    finally:
        stop.set()
        thread.join(timeout=20)
        broker.close()
        server.stop()
