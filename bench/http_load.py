"""Closed-loop HTTP load for the enqueue API benchmark: aiohttp in this process, or wrk.

Both post ``POST /internal/jobs/enqueue`` bodies of ``size`` ``summarize_conversation``
requests, each of its own conversation (no deduplication), from ``concurrency`` keep-alive
connections, each posting as soon as its previous answer came back, for a fixed time after a
warm-up; both report requests/s, p50/p99 latency, the non-202 answers and the CPU the load
generator itself used (it shares the machine with the server, so its cost is part of the
picture).

``aiohttp`` (asyncio, pure Python) needs nothing installed; ``wrk`` (C, LuaJIT; Debian's
``wrk`` package) costs about a fifth of the CPU per request (0.04-0.07 ms against 0.2-0.3 ms
measured here), which on 2 cores shared with the server is the difference between measuring
the API and measuring the client.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PATH = "/internal/jobs/enqueue"
KIND = "summarize_conversation"
#: Conversation ids of one wrk thread start this far apart from the next thread's.
_WRK_THREAD_SPAN = 100_000_000

_WRK_SCRIPT = """
local size = tonumber(os.getenv("BENCH_BODY_REQUESTS"))
local offset = tonumber(os.getenv("BENCH_START"))
local threads = {}
local headers = {["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN"),
                 ["Content-Type"] = "application/json"}
function setup(thread)
  thread:set("base", offset + #threads * __SPAN__)
  table.insert(threads, thread)
end
counter, other = 0, 0  -- globals: done() reads each thread's "other"
function request()
  local parts = {}
  for i = 1, size do
    counter = counter + 1
    local n = base + counter
    parts[i] = string.format(
      '{"kind":"__KIND__","organization_id":%d,"conversation_id":%d}', 1 + n % 50, n + 1)
  end
  return wrk.format("POST", nil, headers, '{"requests":[' .. table.concat(parts, ",") .. ']}')
end
function response(status, headers, body)
  if status ~= 202 then other = other + 1 end
end
function done(summary, latency, requests)
  local non202 = 0
  for _, thread in ipairs(threads) do non202 = non202 + thread:get("other") end
  io.write(string.format("BENCH requests=%d micros=%d p50=%d p99=%d non202=%d errors=%d\\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), non202,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
""".replace("__SPAN__", str(_WRK_THREAD_SPAN)).replace("__KIND__", KIND)
_WRK_RESULT = re.compile(
    r"BENCH requests=(\d+) micros=(\d+) p50=(\d+) p99=(\d+) non202=(\d+) errors=(\d+)"
)


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def body(counter: Iterator[int], size: int) -> bytes:
    """An enqueue body of ``size`` requests, each of its own conversation."""
    requests = []
    for _ in range(size):
        number = next(counter)
        requests.append(
            {"kind": KIND, "organization_id": 1 + number % 50, "conversation_id": number + 1}
        )
    return json.dumps({"requests": requests}).encode()


def _rusage_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


async def _aiohttp_load(
    base: str, token: str, size: int, concurrency: int, seconds: float, warmup: float, start: int
) -> dict[str, Any]:
    import aiohttp

    counter = itertools.count(start)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    loop = asyncio.get_running_loop()
    began = loop.time()
    measure_from, stop_at = began + warmup, began + warmup + seconds
    cpu: dict[str, float] = {}

    async def client(session: aiohttp.ClientSession) -> None:
        while (now := loop.time()) < stop_at:
            if now >= measure_from and "from" not in cpu:
                cpu["from"] = _rusage_seconds(resource.RUSAGE_SELF)
            data = body(counter, size)
            sent = time.perf_counter()
            async with session.post(base + PATH, data=data, headers=headers) as response:
                await response.read()
            elapsed = time.perf_counter() - sent
            if now >= measure_from:
                latencies.append(elapsed)
                statuses[response.status] = statuses.get(response.status, 0) + 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    client_cpu = _rusage_seconds(resource.RUSAGE_SELF) - cpu.get("from", 0.0)
    latencies.sort()
    count = len(latencies)

    def quantile(q: float) -> float:
        return latencies[min(count - 1, int(q * count))] * 1000 if count else float("nan")

    return {
        "requests": count,
        "seconds": seconds,
        "p50_ms": quantile(0.50),
        "p99_ms": quantile(0.99),
        "non_202": {str(k): v for k, v in statuses.items() if k != 202},
        "client_cpu_seconds": client_cpu,
        "next": next(counter),
    }


def _wrk_run(
    base: str, token: str, size: int, concurrency: int, seconds: int, start: int, script: Path
) -> dict[str, Any]:
    threads = max(1, min(2, concurrency))  # two cores: more wrk threads only compete
    env = {
        **os.environ,
        "BENCH_BODY_REQUESTS": str(size),
        "BENCH_START": str(start),
        "BENCH_TOKEN": token,
    }
    before = _rusage_seconds(resource.RUSAGE_CHILDREN)
    command = ["wrk", f"-t{threads}", f"-c{concurrency}", f"-d{seconds}s", "--timeout", "10s"]
    completed = subprocess.run(
        [*command, "-s", str(script), base + PATH],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    found = _WRK_RESULT.search(completed.stdout)
    if found is None:
        raise RuntimeError(f"wrk printed no result: {completed.stdout[-1000:]}")
    requests, micros, p50, p99, non202, errors = (int(value) for value in found.groups())
    non_202 = {"other": non202} if non202 else {}
    if errors:
        non_202["socket errors"] = errors
    return {
        "requests": requests,
        "seconds": micros / 1e6,
        "p50_ms": p50 / 1000,
        "p99_ms": p99 / 1000,
        "non_202": non_202,
        "client_cpu_seconds": _rusage_seconds(resource.RUSAGE_CHILDREN) - before,
        "next": start + threads * _WRK_THREAD_SPAN,
    }


def run_load(
    tool: str,
    base: str,
    token: str,
    *,
    size: int,
    concurrency: int,
    seconds: float,
    warmup: float,
    start: int,
) -> dict[str, Any]:
    """One closed-loop step with ``tool`` (``aiohttp`` or ``wrk``).

    Returns requests, seconds (measured), p50_ms, p99_ms, non_202 (status or error ->
    count), client_cpu_seconds (the load generator's CPU over the measured time) and next
    (the first conversation number the next step may use).
    """
    if tool == "aiohttp":
        return asyncio.run(_aiohttp_load(base, token, size, concurrency, seconds, warmup, start))
    with tempfile.TemporaryDirectory(prefix="bench-wrk-") as directory:
        script = Path(directory) / "enqueue.lua"
        script.write_text(_WRK_SCRIPT)
        warm = _wrk_run(base, token, size, concurrency, max(1, round(warmup)), start, script)
        return _wrk_run(base, token, size, concurrency, round(seconds), warm["next"], script)
