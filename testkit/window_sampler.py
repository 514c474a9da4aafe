"""The provider windows' counters, sampled by a process of its own while a scenario runs
(``testkit.kb_scenario``), and what a series of request times says per window.

  python -m testkit.window_sampler --redis-url URL --namespace NS --out FILE   # SamplerProcess
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.child_process import ROOT, child_env


class WindowSampler:
    """Polls every ``<ns>:window:*`` counter and keeps each key's highest value.

    A window's key lives two periods from its first start, so its final count stays
    readable for at least one period after its last start: polls closer together than a
    period see every window's final count. The sampler runs in a process of its own
    (``python -m testkit.window_sampler``) so the fakes in the driver process cannot
    starve it; ``longest_gap`` says how well it kept up.
    """

    def __init__(self, client: Any, namespace: str) -> None:
        self.client = client
        self.prefix = f"{namespace}:window:"
        self.highest: dict[str, int] = {}
        self.polls = 0
        self.longest_gap = 0.0

    def run(self, stop: threading.Event, interval: float) -> None:
        last = time.monotonic()
        while not stop.wait(interval):
            self.poll()
            now = time.monotonic()
            self.longest_gap = max(self.longest_gap, now - last)
            last = now
        self.poll()

    def poll(self) -> None:
        keys = list(self.client.scan_iter(match=self.prefix + "*", count=1000))
        if keys:
            for key, value in zip(keys, self.client.mget(keys), strict=True):
                if value is not None:
                    name = key.decode()[len(self.prefix) :]
                    self.highest[name] = max(self.highest.get(name, 0), int(value))
        self.polls += 1

    def as_json(self) -> dict[str, Any]:
        return {"highest": self.highest, "polls": self.polls, "longest_gap": self.longest_gap}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WindowSampler:
        sampler = cls(None, "")
        sampler.highest = {k: int(v) for k, v in data["highest"].items()}
        sampler.polls = int(data["polls"])
        sampler.longest_gap = float(data["longest_gap"])
        return sampler

    def by_scope(self) -> dict[str, dict[int, int]]:
        """``<family>:<provider>:<scope>`` (or ``crawl-host:<host>``) -> window index ->
        starts admitted in that window."""
        scopes: dict[str, dict[int, int]] = defaultdict(dict)
        for name, count in self.highest.items():
            scope, _, index = name.rpartition(":")
            if index.isdigit():  # not a reservation cursor (``<scope>:next``)
                scopes[scope][int(index)] = count
        return dict(scopes)


def sampler_main(redis_url: str, namespace: str, out: str, interval: float) -> None:
    """The sampler process: poll until SIGTERM, then write what it saw to ``out``."""
    import redis

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    sampler = WindowSampler(redis.Redis.from_url(redis_url), namespace)
    sampler.poll()
    Path(out + ".ready").touch()
    sampler.run(stop, interval)
    Path(out).write_text(json.dumps(sampler.as_json()))


@dataclass
class SamplerProcess:
    process: subprocess.Popen[bytes]
    out: Path
    result: WindowSampler | None = None

    @classmethod
    def start(cls, redis_url: str, namespace: str, log_dir: Path) -> SamplerProcess:
        out = log_dir / f"{namespace}-windows.json"
        out.unlink(missing_ok=True)
        with open(log_dir / "window-sampler.log", "wb") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "testkit.window_sampler",
                    "--redis-url",
                    redis_url,
                    "--namespace",
                    namespace,
                    "--out",
                    str(out),
                ],
                cwd=ROOT,
                env=child_env({}),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        sampler = cls(process, out)
        ready = Path(f"{out}.ready")
        deadline = time.monotonic() + 20
        while not ready.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                sampler.stop()
                raise RuntimeError("the window sampler did not start")
            time.sleep(0.05)
        ready.unlink()
        return sampler

    def stop(self) -> WindowSampler:
        """Stop it and read what it saw (once; later calls return the same)."""
        if self.result is not None:
            return self.result
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        if not self.out.exists():
            raise RuntimeError(f"the window sampler wrote nothing (exit {self.process.returncode})")
        data = json.loads(self.out.read_text())
        self.out.unlink()
        self.result = WindowSampler.from_json(data)
        return self.result


def aligned_counts(times: Sequence[float], period: float) -> Counter[int]:
    """Events per fixed window ``floor(t / period)`` (the window counters' alignment)."""
    return Counter(int(t * 1000) // max(1, int(period * 1000)) for t in times)


def sliding_max(times: Sequence[float], period: float) -> int:
    """The most events in any interval ``[t, t + period)``."""
    ordered = sorted(times)
    best, start = 0, 0
    for end, t in enumerate(ordered):
        while ordered[start] <= t - period:
            start += 1
        best = max(best, end - start + 1)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.window_sampler")
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--interval", type=float, default=0.1)
    options = parser.parse_args(argv)
    sampler_main(options.redis_url, options.namespace, options.out, options.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
