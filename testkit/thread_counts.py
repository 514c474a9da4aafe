"""Each kind of thread of this process: its CPU, the kernel's part apart, and its context
switches, voluntary (it blocked: a wait, a lock, the interpreter lock) and involuntary (the
scheduler took its core); and what a series of such samples says a job, over the jobs a
process was handed between two samples. Read from ``/proc/self/task/<id>/stat`` and
``status`` (Linux). ``bench.thread_split`` samples a benchmark's worker processes with it.
"""

from __future__ import annotations

import json
import statistics
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: A kind's counters, in this order in each sample (then how many threads of the kind).
COUNTERS = ("user", "system", "voluntary", "involuntary")


def thread_counters(native_id: int) -> tuple[int, int, int, int] | None:
    """A thread of this process: user and system CPU (clock ticks), voluntary and
    involuntary context switches; None once it has ended."""
    try:
        with open(f"/proc/self/task/{native_id}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        with open(f"/proc/self/task/{native_id}/status") as status:
            switches = {
                name: int(value)
                for name, value in (line.split(":", 1) for line in status if ":" in line)
                if name in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")
            }
    except (FileNotFoundError, ProcessLookupError):
        return None
    # After the command's ")": state is field 3, utime 14 and stime 15 (proc(5)).
    return (
        int(fields[11]),
        int(fields[12]),
        switches["voluntary_ctxt_switches"],
        switches["nonvoluntary_ctxt_switches"],
    )


def kind_of(thread: threading.Thread) -> str:
    """A thread's kind: its class, or for a plain ``Thread`` its name's first word and its
    target (``settle:ScriptQueue._send_forever``)."""
    if type(thread) is not threading.Thread:
        return type(thread).__name__
    target = getattr(thread, "_target", None)
    where = getattr(target, "__qualname__", "") if target is not None else ""
    return f"{thread.name.split('-')[0]}:{where}" if where else thread.name


def sample() -> dict[str, list[int]]:
    """Each kind of live thread of this process: its counters summed, and how many threads
    (the last item)."""
    kinds: dict[str, list[int]] = {}
    for thread in threading.enumerate():
        if thread.native_id is None:
            continue
        counters = thread_counters(thread.native_id)
        if counters is None:
            continue
        total = kinds.setdefault(kind_of(thread), [0] * (len(COUNTERS) + 1))
        for index, value in enumerate(counters):
            total[index] += value
        total[-1] += 1
    return kinds


def window(samples: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The first sample after the process's first job and the last before its last (None
    when fewer than two samples fall between)."""
    if not samples:
        return None
    final = samples[-1]["jobs"]
    running = [s for s in samples if 0 < s["jobs"] < final]
    if len(running) < 2 or running[-1]["jobs"] == running[0]["jobs"]:
        return None
    return running[0], running[-1]


def per_job(files: Iterable[Path], tick_us: float) -> dict[str, dict[str, float]]:
    """Each kind's CPU (µs, and the kernel's part) and context switches a job, over every
    process's window; {} when no process ran long enough to have one. A thread that ends
    inside a window takes its counts out of its kind's (a worker's threads live as long as
    it serves)."""
    totals: dict[str, list[int]] = {}
    jobs = 0
    for path in files:
        samples = [json.loads(line) for line in path.read_text().splitlines() if line]
        span = window(samples)
        if span is None:
            continue
        first, last = span
        jobs += last["jobs"] - first["jobs"]
        for kind, counters in last["kinds"].items():
            before = first["kinds"].get(kind, [0] * len(counters))
            total = totals.setdefault(kind, [0] * len(COUNTERS))
            for index in range(len(COUNTERS)):
                total[index] += counters[index] - before[index]
    if not jobs:
        return {}
    return {
        kind: {
            "cpu_us": round((user + system) * tick_us / jobs, 1),
            "system_cpu_us": round(system * tick_us / jobs, 1),
            "voluntary_switches": round(voluntary / jobs, 2),
            "involuntary_switches": round(involuntary / jobs, 2),
        }
        for kind, (user, system, voluntary, involuntary) in sorted(
            totals.items(), key=lambda item: -(item[1][0] + item[1][1])
        )
    }


#: What :func:`per_job` gives each kind, in this order.
FIGURES = ("cpu_us", "system_cpu_us", "voluntary_switches", "involuntary_switches")


def medians(splits: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Several measures' :func:`per_job`: each kind's figures, medians over the measures that
    saw it, in the order the kinds first came."""
    kinds = {kind: None for split in splits for kind in split}
    return {
        kind: {
            key: round(statistics.median(split[kind][key] for split in splits if kind in split), 2)
            for key in FIGURES
        }
        for kind in kinds
    }
