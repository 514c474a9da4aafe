"""Pools of spawned worker processes for the benchmarks, with counters in shared memory: each
process builds its broker, waits for the start signal and runs a worker until told to stop,
while the driver reads its counters and its CPU.

Only the standard library, redis and dramatiq are imported here (besides ``bench.common``):
the raw Dramatiq worker of the throughput benchmark imports this module and must not load
the platform.
"""

from __future__ import annotations

import logging
import multiprocessing
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from dramatiq.middleware import Middleware

from bench.common import LOG_DIR, cpu_split, read_status_kib

#: A worker process's log line (``_child``'s format).
_LOG_LINE = re.compile(r"^\S+ \S+ (?P<level>[A-Z]+) (?P<logger>\S+): (?P<message>.*)$")

#: Per worker process, one slot of these doubles in shared memory.
FIELDS = (
    "ready",  # 1 once the broker is built and the process waits for the start signal
    "started_at",  # epoch seconds just before the Dramatiq worker started
    "delivered",  # messages handed to a worker thread (before_process_message, first hook)
    "completed",  # runs that returned (after_process_message without exception)
    "delayed",  # runs ended by a Delay (provider window full, or the handler's own)
    "failed",  # runs ended by any other exception
    "failed_window",  # ... of which the exception names the provider window (or a 429)
    "skipped",  # messages dropped before the actor (stale copy, parked at claim, ...)
    "acked",  # messages acknowledged (after_ack)
    "last_ack_at",  # epoch seconds of the latest ack
)
FIELD = {name: i for i, name in enumerate(FIELDS)}


def _is_delay(exception: BaseException) -> bool:
    outcome = getattr(exception, "outcome", exception)  # tiers' Held wraps the outcome
    return type(outcome).__name__ == "Delay"


class Counters(Middleware):
    """Counts deliveries and outcomes of one worker process into its shared-memory slot.

    Added first to the middleware list, so ``before_process_message`` sees every delivery,
    including the ones a later middleware stops, and the ``after_*`` hooks (which Dramatiq
    calls in reverse order) run after every other middleware is done with the message.
    """

    def __init__(self, shared: Any, slot: int) -> None:
        self.shared = shared
        self.base = slot * len(FIELDS)
        self.lock = threading.Lock()

    def _add(self, field: str, stamp: str | None = None) -> None:
        with self.lock:
            self.shared[self.base + FIELD[field]] += 1
            if stamp:
                self.shared[self.base + FIELD[stamp]] = time.time()

    def before_process_message(self, broker: Any, message: Any) -> None:
        self._add("delivered")

    def after_process_message(
        self,
        broker: Any,
        message: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        if exception is None:
            self._add("completed")
        elif _is_delay(exception):
            self._add("delayed")
        else:
            self._add("failed")
            text = str(getattr(exception, "outcome", exception))
            if "window" in text or "429" in text:
                self._add("failed_window")

    def after_skip_message(self, broker: Any, message: Any) -> None:
        self._add("skipped")

    def after_ack(self, broker: Any, message: Any) -> None:
        self._add("acked", stamp="last_ack_at")


def wait_for_go(shared: Any, slot: int, go: Any) -> None:
    """In a worker process: report ready, wait for the pool's start signal, stamp the start."""
    base = slot * len(FIELDS)
    shared[base + FIELD["ready"]] = 1
    go.wait()
    shared[base + FIELD["started_at"]] = time.time()


def stop_event_from(stop: Any) -> threading.Event:
    """A threading.Event set once the pool's (multiprocessing) stop event is set."""
    event = threading.Event()

    def relay() -> None:
        stop.wait()
        event.set()

    threading.Thread(target=relay, name="bench-stop", daemon=True).start()
    return event


def _child(target: Callable[..., None], log_path: str, *args: Any) -> None:
    """Entry of a worker process: log warnings and errors to ``log_path``, run ``target``."""
    logging.basicConfig(
        filename=log_path,
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    target(*args)


class WorkerPool:
    """Worker processes started with multiprocessing's ``spawn`` method.

    ``target(slot, shared, go, stop, *args)`` builds its broker, calls :func:`wait_for_go`,
    runs a Dramatiq worker until ``stop`` is set, then stops it (drain) and returns. The
    processes' warnings and errors go to ``bench/results/logs/<name>-<slot>.log``.
    """

    def __init__(
        self, target: Callable[..., None], args: Sequence[Any], processes: int, name: str
    ) -> None:
        self.context = multiprocessing.get_context("spawn")
        self.shared = self.context.Array("d", processes * len(FIELDS), lock=False)
        self.go_event = self.context.Event()
        self.stop_event = self.context.Event()
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.logs = [LOG_DIR / f"{name}-{slot}.log" for slot in range(processes)]
        for log in self.logs:
            log.unlink(missing_ok=True)
        self.processes = [
            self.context.Process(
                target=_child,
                args=(target, str(log), slot, self.shared, self.go_event, self.stop_event, *args),
                name=f"bench-worker-{slot}",
                daemon=True,
            )
            for slot, log in enumerate(self.logs)
        ]

    def log_summary(self) -> dict[str, Any]:
        """Records the worker processes logged, by level, and the most frequent messages."""
        levels: Counter[str] = Counter()
        messages: Counter[str] = Counter()
        for log in self.logs:
            if not log.exists():
                continue
            for line in log.read_text(errors="replace").splitlines():
                match = _LOG_LINE.match(line)
                if match:
                    levels[match["level"]] += 1
                    head = re.sub(r"\(.*\)|[0-9a-f-]{36}|\d+(\.\d+)?", "…", match["message"])
                    messages[f"{match['level']} {match['logger']}: {head[:90]}"] += 1
        return {
            "files": [str(log) for log in self.logs],
            "by_level": dict(levels),
            "top_messages": dict(messages.most_common(5)),
        }

    def start(self, timeout: float = 120.0) -> None:
        """Spawn the processes and wait until each one is ready to start its worker."""
        for process in self.processes:
            process.start()
        deadline = time.monotonic() + timeout
        while self.total("ready") < len(self.processes):
            for process in self.processes:
                if not process.is_alive():
                    raise RuntimeError(f"{process.name} exited early ({process.exitcode})")
            if time.monotonic() > deadline:
                raise RuntimeError("worker processes did not get ready in time")
            time.sleep(0.01)

    def go(self) -> float:
        """Start every worker at once; returns the time the signal was given."""
        now = time.time()
        self.go_event.set()
        return now

    def values(self, field: str) -> list[float]:
        offset = FIELD[field]
        return [self.shared[slot * len(FIELDS) + offset] for slot in range(len(self.processes))]

    def total(self, field: str) -> float:
        return sum(self.values(field))

    def counters(self) -> dict[str, float]:
        return {name: self.total(name) for name in FIELDS if name not in ("ready",)}

    def wait_for(
        self, predicate: Callable[[], bool], timeout: float, interval: float = 0.005
    ) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout:.0f}s: {self.counters()}")
            for process in self.processes:
                if not process.is_alive():
                    raise RuntimeError(f"{process.name} exited ({process.exitcode})")
            time.sleep(interval)

    def cpu_seconds(self) -> float:
        """CPU time used by all worker processes so far."""
        return sum(self.cpu_split())

    def cpu_split(self) -> tuple[float, float]:
        """User and system CPU time used by all worker processes so far."""
        splits = [cpu_split(p.pid) or (0.0, 0.0) for p in self.processes if p.pid is not None]
        return sum(user for user, _ in splits), sum(system for _, system in splits)

    def memory_mib(self) -> list[dict[str, float | None]]:
        """Per process: peak resident set (VmHWM) and current resident set (VmRSS), MiB."""
        rows = []
        for process in self.processes:
            assert process.pid is not None
            hwm = read_status_kib(process.pid, "VmHWM")
            rss = read_status_kib(process.pid, "VmRSS")
            rows.append(
                {
                    "pid": process.pid,
                    "peak_rss_mib": round(hwm / 1024, 1) if hwm else None,
                    "rss_mib": round(rss / 1024, 1) if rss else None,
                }
            )
        return rows

    def shutdown(self, timeout: float = 30.0) -> None:
        self.stop_event.set()
        self.go_event.set()  # a process still waiting to start exits at once
        deadline = time.monotonic() + timeout
        started = [process for process in self.processes if process.pid is not None]
        for process in started:
            process.join(max(0.1, deadline - time.monotonic()))
        for process in started:
            if process.is_alive():
                process.terminate()
                process.join(5)
            if process.is_alive():
                process.kill()
                process.join(5)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


# -- numbers -----------------------------------------------------------------------------------
