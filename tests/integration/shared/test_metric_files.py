"""A full disk under ``PROMETHEUS_MULTIPROC_DIR``: a metric series that finds no room stays in
its process's memory, and neither a process nor a worker's jobs die of it. The disk is a real
tmpfs of 64 kB, mounted for the test (root only) and filled to the last block."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from router.enqueue import Router
from router.requests import JobRequest
from testkit.child_process import child_env
from tests import platform_harness as h
from tiers.broker import TierBroker

#: Enough series of each kind to cross many of a file's pages.
SERIES = 300

#: A process recording SERIES series of a counter, a histogram and a gauge, then printing
#: what it holds of the counter.
RECORDER = f"""
from shared import metrics

counter = metrics.counter("disk_probe_total", "probe", ["n"])
histogram = metrics.histogram("disk_probe_seconds", "probe", ["n"])
gauge = metrics.gauge("disk_probe_level", "probe", ["n"], mode="liveall")
for n in range({SERIES}):
    counter.labels(str(n)).inc(2)
    histogram.labels(str(n)).observe(0.1)
    gauge.labels(str(n)).set(n)
print(sum(counter.labels(str(n))._value.get() for n in range({SERIES})))
"""


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A metrics directory on a 64 kB tmpfs with no block left."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("mounting a tmpfs needs root")
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], check=True)
    try:
        directory = mount / "metrics"
        directory.mkdir()
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass  # ENOSPC: the disk is full
        finally:
            os.close(fd)
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def record(directory: Path) -> subprocess.CompletedProcess[str]:
    """Run :data:`RECORDER` in a process whose metrics go to ``directory``."""
    return subprocess.run(
        [sys.executable, "-c", RECORDER],
        env=child_env({"PROMETHEUS_MULTIPROC_DIR": str(directory)}),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_process_recording_metrics_on_a_full_disk_keeps_them_in_memory(full_disk: Path) -> None:
    done = record(full_disk)
    # prometheus_client's own files would have killed it (SIGBUS: exit -7) at a new page
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert float(done.stdout.strip()) == 2.0 * SERIES
    assert done.stderr.count("metrics: no room in") == 1


def test_a_worker_whose_metrics_disk_is_full_completes_its_jobs(
    full_disk: Path,
    router: Router,
    broker: TierBroker,
    redis_url: str,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a worker process whose metrics directory is on the full disk
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(full_disk))
    worker = h.start_worker_process(redis_url, namespace, threads=4)
    try:
        # When it runs 40 jobs (each settled run is counted in the job metrics)
        router.enqueue_many([JobRequest("t_plain", 1, {"item": str(i)}) for i in range(40)])
        h.wait_until(
            lambda: all(h.state(broker, f"plain-{i}") == "completed" for i in range(40)),
            timeout=60,
        )
        # Then every job completed at its first run, and the worker still runs
        assert worker.is_alive() and worker.exitcode is None
        records = [broker.jobs.record(f"plain-{i}") or {} for i in range(40)]
        assert all(r.get("attempts") == "1" for r in records), records
    finally:
        worker.terminate()
        worker.join(15)
    assert worker.exitcode == 0 or worker.exitcode == -15


def test_a_disk_with_room_still_receives_every_value(tmp_path: Path) -> None:
    directory = tmp_path / "metrics"
    directory.mkdir()
    done = record(directory)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.strip()) == 2.0 * SERIES
    assert "no room" not in done.stderr
    # The values are in the files, as a scrape reads them
    from prometheus_client import CollectorRegistry, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(directory))  # type: ignore[no-untyped-call]
    total = sum(
        sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.name == "speedtier_disk_probe_total"
    )
    assert total == 2.0 * SERIES
