"""Shared helpers: Redis namespaces and command counts, processes' CPU from ``/proc``,
percentiles, result files and markdown (pools of spawned worker processes are
``bench.worker_pool``).

Only the standard library, redis and dramatiq are imported here: the raw Dramatiq worker of
the throughput benchmark imports this module and must not load the platform.
"""

from __future__ import annotations

import json
import math
import os
import platform
import signal
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis

#: Benchmarks use their own Redis database; every run uses a fresh key namespace in it.
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
#: The benchmarks' credentials key (made for them, no deployment's secret): stored
#: connection credentials are sealed with it.
BENCH_CREDENTIALS_KEY = "n4VhQ0m3cYb8KxT2pW7sZ1eR6uJ9aL5dG3fH8kM0qXo="
RESULTS_DIR = Path(__file__).resolve().parent / "results"
LOG_DIR = RESULTS_DIR / "logs"
#: Every connection a benchmark opens is named ``bench-...`` (CLIENT SETNAME), so traffic from
#: other clients of the same Redis server (which would skew INFO commandstats) can be spotted.
CLIENT_PREFIX = "bench"


# -- Redis -------------------------------------------------------------------------------------


def allow_loopback_providers() -> None:
    """Let this process's connectors reach the providers' fakes, which listen on loopback
    (the egress guard refuses private addresses unless allowed, ``shared.egress``)."""
    from shared.egress.addresses import address_guard, set_default_guard

    set_default_guard(address_guard(False, ["127.0.0.1/32"]))


def interrupt_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt, so a stopped run still stops its worker processes
    and deletes its Redis keys (the ``finally`` blocks run)."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


def tagged_url(url: str, name: str) -> str:
    """``url`` with ``client_name`` set, so every connection of its pool is named."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "client_name"]
    query.append(("client_name", f"{CLIENT_PREFIX}-{name}"))
    return urlunsplit(parts._replace(query=urlencode(query)))


def connect(url: str, name: str = "driver") -> redis.Redis:
    return redis.Redis.from_url(tagged_url(url, name))


def new_namespace(name: str) -> str:
    return f"bench-{name}-{uuid.uuid4().hex[:8]}"


def delete_namespace(client: redis.Redis, namespace: str) -> int:
    """Delete every key of a namespace; returns how many were deleted."""
    deleted = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=f"{namespace}:*", count=2000):
        batch.append(key)
        if len(batch) >= 1000:
            deleted += int(client.unlink(*batch))
            batch.clear()
    if batch:
        deleted += int(client.unlink(*batch))
    return deleted


#: Commands the benchmark driver itself sends while measuring (INFO, CLIENT LIST/SETNAME).
_OWN_COMMANDS = ("info", "client|")


def command_calls(client: redis.Redis) -> dict[str, int]:
    """``INFO commandstats`` as ``command -> calls`` (server-wide, scripts' inner calls
    included: an EVALSHA counts once as ``evalsha`` and once per command it runs)."""
    stats = client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): int(value["calls"])
        for name, value in stats.items()
        if isinstance(value, dict)
    }


def command_delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    delta = {
        name: calls - before.get(name, 0)
        for name, calls in after.items()
        if not name.startswith(_OWN_COMMANDS)
    }
    return dict(sorted(((k, v) for k, v in delta.items() if v), key=lambda kv: -kv[1]))


def commands_per_job(delta: Mapping[str, int], jobs: int) -> dict[str, Any]:
    """Totals of a commandstats delta, per job: every call, the round trips that ran a
    script (``evalsha``/``eval``), and each command."""
    total = sum(delta.values())
    scripts = delta.get("evalsha", 0) + delta.get("eval", 0)
    return {
        "calls": total,
        "calls_per_job": round(total / jobs, 2),
        "script_calls_per_job": round(scripts / jobs, 2),
        "per_command_per_job": {k: round(v / jobs, 3) for k, v in delta.items()},
    }


def foreign_clients(client: redis.Redis, active_within: float) -> list[str]:
    """Clients of this Redis server that are not ours and ran a command in the last
    ``active_within`` seconds: their commands are in the commandstats deltas too."""
    found = []
    for entry in client.client_list():
        name = entry.get("name", "")
        if name.startswith(CLIENT_PREFIX):
            continue
        if int(entry.get("idle", 0)) <= math.ceil(active_within):
            found.append(f"{entry.get('addr')} db={entry.get('db')} cmd={entry.get('cmd')}")
    return found


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, ppid, pgrp, ...,
    utime at 11, stime at 12), or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_stats() -> Iterator[tuple[int, list[str]]]:
    """``(pid, stat_fields(pid))`` of every live process."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(int(entry))
            if fields is not None:
                yield int(entry), fields


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time a process has used so far."""
    split = cpu_split(pid)
    return None if split is None else sum(split)


def cpu_split(pid: int) -> tuple[float, float] | None:
    """The user and the system (kernel) CPU time a process has used so far."""
    fields = stat_fields(pid)
    if fields is None:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def machine_busy_seconds() -> float:
    """CPU time the whole machine has been busy (all processes, all cores), from /proc/stat."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def redis_cpu_seconds(client: redis.Redis) -> float:
    """User + system CPU time the Redis server has used so far (all its clients)."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def read_status_kib(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def rnd(value: float, digits: int = 3) -> float:
    return round(value, digits)


# -- results -----------------------------------------------------------------------------------


def machine(client: redis.Redis) -> dict[str, Any]:
    import dramatiq

    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "dramatiq": dramatiq.__version__,
        "redis_py": redis.__version__,
        "redis_server": client.info("server").get("redis_version"),
    }


def write_result(name: str, result: Mapping[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(result, indent=2, sort_keys=False) + "\n")
    return path


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
    ]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def log_note(logs: Mapping[str, Any]) -> str | None:
    """A line about what the worker processes logged at WARNING and above, if anything."""
    if not logs["by_level"]:
        return None
    levels = ", ".join(f"{n:,} {level}" for level, n in sorted(logs["by_level"].items()))
    top = "; ".join(f"{n:,} x `{m}`" for m, n in list(logs["top_messages"].items())[:2])
    return f"Worker logs: {levels} (most frequent: {top})."


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


class TraceReader:
    """Reads the ``<namespace>:trace`` list the traced handlers append to, incrementally."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.key = f"{namespace}:trace"
        self.events: list[dict[str, Any]] = []

    def poll(self) -> list[dict[str, Any]]:
        """Fetch the events appended since the last poll; returns every event so far."""
        raw = self.client.lrange(self.key, len(self.events), -1)
        self.events.extend(json.loads(item) for item in raw)
        return self.events

    def of(self, event: str, items: set[str] | None = None) -> list[dict[str, Any]]:
        return [
            e for e in self.events if e["ev"] == event and (items is None or e["item"] in items)
        ]
