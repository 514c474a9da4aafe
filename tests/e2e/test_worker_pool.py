"""``speedtier worker --processes N`` keeps N children: a dead child is replaced, a crash loop
ends the pool with a failure status, and SIGTERM drains every child and exits 0."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from router.requests import JobRequest
from services.app.bootstrap import Platform
from services.app.worker_pool import RestartPolicy, WorkerPool
from tests.fixtures_platform import MakePlatform
from tests.platform_harness import wait_until

REPO = Path(__file__).resolve().parents[2]
STARTED = re.compile(r"maintenance: started (maintenance-\d) \(pid (\d+)\)")
CONSUMING = re.compile(r" (\d+) tiers\.worker: worker consuming ")


class Lines:
    """Everything a process writes (stdout and stderr), collected by a thread."""

    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        with stream:
            for line in iter(stream.readline, ""):
                self._queue.put(line.rstrip("\n"))

    def finish(self) -> None:
        """Wait for the end of the output (every writer has exited)."""
        self._reader.join(timeout=30)

    def _pull(self, timeout: float) -> None:
        with contextlib.suppress(queue.Empty):
            self.seen.append(self._queue.get(timeout=timeout))

    def matching(self, pattern: re.Pattern[str]) -> list[re.Match[str]]:
        while not self._queue.empty():
            self._pull(0)
        return [m for line in self.seen if (m := pattern.search(line))]

    def wait_count(self, pattern: re.Pattern[str], count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.matching(pattern)) < count:
            if time.monotonic() > deadline:
                tail = "\n".join(self.seen[-40:])
                pytest.fail(f"fewer than {count} lines match {pattern.pattern!r}:\n{tail}")
            self._pull(0.2)


def parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[1])


def _children(parent: int) -> list[tuple[int, bytes]]:
    """The live (not zombie) children of ``parent`` with their command lines, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or parent_of(int(entry.name)) != parent:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append((int(entry.name), cmdline))
    return found


def worker_children(parent: int) -> set[int]:
    """The live worker processes of the pool ``parent``: spawned by it, or forked by its fork
    server (not its resource tracker, nor the server itself, a new interpreter running
    ``forkserver`` or a fork of the pool with the pool's command line)."""
    try:
        own = (Path(f"/proc/{parent}") / "cmdline").read_bytes()
    except OSError:
        return set()
    found = set()
    for pid, cmdline in _children(parent):
        if b"spawn_main" in cmdline:
            found.add(pid)
        elif b"forkserver" in cmdline or cmdline == own:
            found |= {child for child, _ in _children(pid)}
    return found


@pytest.fixture
def platform(make_platform: MakePlatform, tmp_path: Path) -> Platform:
    return make_platform(data_dir=str(tmp_path / "data"), component="test")


def run_ticks(platform: Platform, slots: list[str]) -> None:
    """Enqueue one group-slot-reaper tick per slot and wait until a worker completed each."""
    platform.router.enqueue_many(
        [JobRequest("tick:group-slot-reaper", None, {"slot": slot}) for slot in slots]
    )

    def completed() -> bool:
        records = [platform.broker.jobs.record(f"group-slot-reaper-tick-{s}") for s in slots]
        return all(r is not None and r["state"] == "completed" for r in records)

    wait_until(completed, timeout=60)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_killed_child_is_replaced_and_sigterm_drains_the_pool(
    platform: Platform, redis_url: str, database_url: str, namespace: str, tmp_path: Path
) -> None:
    # Given `speedtier worker --tier maintenance --processes 2` on the test Redis/PostgreSQL
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_DATA_DIR": str(tmp_path / "data"),
        "SPEEDTIER_WORKER_DRAIN_SECONDS": "5",
        "SPEEDTIER_WORKER_POLL_MS": "100",
        "PYTHONUNBUFFERED": "1",
    }
    command = [sys.executable, "-m", "services.app.cli", "worker", "--tier", "maintenance"]
    supervisor = subprocess.Popen(
        [*command, "--processes", "2", "--threads", "2"],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert supervisor.stdout is not None
    output = Lines(supervisor.stdout)
    try:
        wait_until(lambda: len(worker_children(supervisor.pid)) == 2, timeout=60)
        first = worker_children(supervisor.pid)
        output.wait_count(CONSUMING, 2)  # both consuming before the first is killed
        assert {int(m[1]) for m in output.matching(CONSUMING)} == first
        run_ticks(platform, ["before"])

        # When each original child is SIGKILLed in turn
        for killed in sorted(first):
            before = worker_children(supervisor.pid)
            os.kill(killed, signal.SIGKILL)

            def replaced(killed: int = killed, before: set[int] = before) -> bool:
                now = worker_children(supervisor.pid)
                return killed not in now and len(now - before) == 1

            # Then a new child with a new pid takes its place, under the same supervisor
            wait_until(replaced, timeout=30)
        current = worker_children(supervisor.pid)
        assert len(current) == 2 and not current & first
        # and each restart was logged
        output.wait_count(re.compile("died with signal SIGKILL; restarting"), 2)
        assert {int(m[2]) for m in output.matching(STARTED)} == first | current
        # and jobs run, now only on the replacements (both originals are gone)
        run_ticks(platform, [f"after-{i}" for i in range(6)])
        output.wait_count(CONSUMING, 4)
        assert {int(m[1]) for m in output.matching(CONSUMING)} == first | current

        # When the supervisor gets SIGTERM, Then every child drains and it exits 0
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=60) == 0, "\n".join(output.seen[-40:])
        output.finish()
        assert all(parent_of(pid) is None for pid in current)
        assert output.matching(re.compile(r"SIGTERM received; draining"))
        drained = re.compile(r"maintenance-\d \(pid (\d+)\) exited with exit status 0")
        assert {int(m[1]) for m in output.matching(drained)} == current
    finally:
        stop_everything(supervisor)
        output.finish()


def stop_everything(supervisor: subprocess.Popen[str]) -> None:
    """After a failure: SIGTERM the pool, then SIGKILL it and whatever children it left."""
    if supervisor.poll() is not None:
        return
    children = worker_children(supervisor.pid)
    supervisor.terminate()
    try:
        supervisor.wait(timeout=30)
    except subprocess.TimeoutExpired:
        supervisor.kill()
        supervisor.wait()
    for pid in children | worker_children(supervisor.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# -- children forked from a preloaded server -------------------------------------------------


def report_start(marker: str, out: str) -> None:
    """A child that writes whether ``marker`` was imported before it ran, and its parent, then
    dies (the pool then ends: no restart is allowed)."""
    Path(out).write_text(json.dumps({"preloaded": marker in sys.modules, "ppid": os.getppid()}))
    sys.exit(3)


@pytest.mark.timeout(120)
def test_children_are_forked_from_a_server_that_imported_the_preload(tmp_path: Path) -> None:
    # Given a pool whose children come from a server preloading a module the child's own
    # code does not import
    out = tmp_path / "child.json"
    pool = WorkerPool(
        report_start,
        ("colorsys", str(out)),
        size=1,
        name="preloaded",
        policy=RestartPolicy(max_restarts=0),
        poll_seconds=0.05,
        preload=("colorsys",),
    )
    # When it runs (the server started ahead, as the worker command does) and its child died
    pool.prepare()
    assert pool.run() == 1
    seen = json.loads(out.read_text())
    # Then the child found the module imported, and its parent is the server, not the pool
    assert seen["preloaded"] is True
    assert seen["ppid"] != os.getpid()


FORKED_SERVER = """
import json, os, sys
from services.app.worker_pool import RestartPolicy, WorkerPool
from tests.e2e.test_worker_pool import report_start

sys.set_by_the_pool_before_its_server = True  # what a fork of this process has, a spawn not
pool = WorkerPool(
    report_start, ("colorsys", {out!r}), size=1, name="forked",
    policy=RestartPolicy(max_restarts=0), poll_seconds=0.05, preload=("colorsys",),
)
pool.prepare()
print(pool.run())
"""


def report_fork(marker: str, out: str) -> None:
    """:func:`report_start`, and whether the pool's mark made before its server started is
    here."""
    mark = getattr(sys, "set_by_the_pool_before_its_server", False)
    Path(out).write_text(
        json.dumps({"preloaded": marker in sys.modules, "ppid": os.getppid(), "mark": mark})
    )
    sys.exit(3)


@pytest.mark.timeout(120)
def test_a_single_threaded_pool_forks_its_server_from_itself(tmp_path: Path) -> None:
    # Given a pool started from a process of one thread (the worker command's)
    out = tmp_path / "child.json"
    script = FORKED_SERVER.format(out=str(out)).replace("report_start", "report_fork")
    # When it runs and its child died
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=100
    )
    assert done.stdout.split() == ["1"], done.stderr
    seen = json.loads(out.read_text())
    # Then the child was forked from a server that is a fork of the pool's process (it has
    # the pool's mark), which imported the preload
    assert seen["preloaded"] is True and seen["mark"] is True
    # and the server ended with the pool's process
    wait_until(lambda: not Path(f"/proc/{seen['ppid']}").exists(), timeout=30)


# -- the crash-loop limit, on real spawned children ------------------------------------------


def crash_unless_first(claim: str, drained: str) -> None:
    """The first child to claim ``claim`` runs until SIGTERM (then writes ``drained``); every
    other child exits with status 3 at once."""
    try:
        os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        sys.exit(3)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    Path(drained).write_text("drained")


@pytest.mark.timeout(120)
def test_a_crash_loop_stops_the_pool_with_a_failure_status(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a pool of 2 where one child runs and every other child dies at once,
    # with at most 3 restarts a minute
    policy = RestartPolicy(
        backoff_seconds=0.1, max_backoff_seconds=0.4, max_restarts=3, window_seconds=60
    )
    claim, drained = tmp_path / "claim", tmp_path / "drained"
    pool = WorkerPool(
        crash_unless_first,
        (str(claim), str(drained)),
        size=2,
        name="loop",
        policy=policy,
        poll_seconds=0.05,
    )

    started = time.monotonic()
    code = pool.run()
    elapsed = time.monotonic() - started

    # Then the crashing child was restarted 3 times with growing delays (0.1, 0.2, 0.4 s),
    # its fourth death ended the pool with status 1, and the healthy child was drained
    assert code == 1
    assert pool.restarts == 3
    assert elapsed >= 0.7
    assert drained.read_text() == "drained"
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("loop: crash loop (a child died again after 3 restarts" in e for e in errors)
    restarts = [r.getMessage() for r in caplog.records if "; restarting it in" in r.getMessage()]
    assert [m.split("restarting it in ")[1].split(" s")[0] for m in restarts] == [
        "0.1",
        "0.2",
        "0.4",
    ]
    assert all(child is None or child.exitcode is not None for child in pool.children)


def test_a_pool_without_redis_or_database_fails_at_once_instead_of_crash_looping(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env["SPEEDTIER_DATA_DIR"] = str(tmp_path / "data")  # no `speedtier up` lends its URLs
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "services.app.cli", "worker", "--tier", "fast", "--processes", "2"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "Error: REDIS_URL is not set" in result.stderr
    assert "started fast-" not in result.stderr
    assert time.monotonic() - started < 30  # no restart backoff was waited out
