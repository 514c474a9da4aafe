"""Start a worker command and read its log as it comes, to time its handler's first start
(``bench.first_job``).

The handler's start is the first log line whose message begins with :data:`HANDLER_LINE`:
Dramatiq's ``Actor.__call__`` logs ``Received args=...`` at DEBUG right before it calls the
function, in speedtier's workers and in Dramatiq's own; the BullMQ script prints it from its
processor. Python commands run with this checkout first on the path and with their compiled
bytecode kept under ``bench/results/pycache`` (``PYTHONPYCACHEPREFIX``), as the image ships
the package compiled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from bench.common import RESULTS_DIR

ROOT = Path(__file__).resolve().parents[1]
PYCACHE = RESULTS_DIR / "pycache"
HANDLER_LINE = "Received args="

#: A parsed log line: (epoch seconds, logger, message).
Line = tuple[float, str, str]


@dataclass
class Start:
    """One started process: when it was spawned and what its output said, as it came."""

    spawned_at: float
    process: subprocess.Popen[str]
    handler_at: float | None = None
    lines: list[Line] = field(default_factory=list)
    handled: threading.Event = field(default_factory=threading.Event)


def python_env(extra: dict[str, str], root: Path = ROOT) -> dict[str, str]:
    """The environment of a Python process under test: the checkout ``root`` (this one by
    default) first on the path, compiled bytecode kept (and reused) under
    bench/results/pycache."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    path = [str(root), *filter(None, [env.get("PYTHONPATH")])]
    env.update({"PYTHONPATH": os.pathsep.join(path), "PYTHONPYCACHEPREFIX": str(PYCACHE)})
    env.update(extra)
    return env


def parse_json_line(line: str) -> Line | None:
    """speedtier's JSON log line as (epoch seconds, logger, message)."""
    try:
        record = json.loads(line)
        stamp = datetime.fromisoformat(record["time"]).timestamp()
    except (ValueError, KeyError, TypeError):
        return None
    return stamp, str(record.get("logger", "")), str(record.get("message", ""))


def parse_dramatiq_line(line: str) -> Line | None:
    """Dramatiq's ``[date time,ms] [PID n] [thread] [logger] [LEVEL] message`` (local time)."""
    if not line.startswith("["):
        return None
    try:
        stamp = datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        fields = line.split("] [", 4)  # time, PID, thread, logger, "LEVEL] message"
        return stamp, fields[3], fields[4].split("] ", 1)[1]
    except (ValueError, IndexError):
        return None


def parse_bullmq_line(line: str) -> Line | None:
    try:
        return json.loads(line)["handler_ms"] / 1000, "processor", HANDLER_LINE
    except (ValueError, KeyError, TypeError):
        return None


def start(
    command: Sequence[str],
    env: dict[str, str],
    parse: Callable[[str], Line | None],
    stream: str = "stderr",
    cwd: Path = ROOT,
) -> Start:
    """Spawn ``command`` in a session of its own and read its log lines as they come."""
    spawned_at = time.time()
    process = subprocess.Popen(
        list(command),
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE if stream == "stdout" else subprocess.DEVNULL,
        stderr=subprocess.PIPE if stream == "stderr" else subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    started = Start(spawned_at, process)
    output = process.stderr if stream == "stderr" else process.stdout
    assert output is not None

    def read() -> None:
        for line in output:
            parsed = parse(line)
            if parsed is None:
                continue
            started.lines.append(parsed)
            if started.handler_at is None and parsed[2].startswith(HANDLER_LINE):
                started.handler_at = parsed[0]
                started.handled.set()
        started.handled.set()  # the output ended: the process is gone

    threading.Thread(target=read, name="bench-first-job-reader", daemon=True).start()
    return started


def stop(started: Start, timeout: float = 60.0) -> None:
    """SIGTERM the process, as Kubernetes stops a pod's (a pool drains its children and
    exits), wait for it, then SIGKILL whatever is left of its session."""
    process = started.process
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def first_job_seconds(started: Start, timeout: float = 60.0) -> float:
    """Seconds from the spawn to the handler's start (the process is stopped afterwards)."""
    try:
        if not started.handled.wait(timeout) or started.handler_at is None:
            tail = "; ".join(
                f"{logger}: {message[:120]}" for _, logger, message in started.lines[-5:]
            )
            raise RuntimeError(f"no handler started (exit code {started.process.poll()}): {tail}")
        return started.handler_at - started.spawned_at
    finally:
        stop(started)
