"""The knowledge-sync scenario's worker processes (``testkit.kb_scenario``): each builds the
production platform from environment variables alone (``bootstrap()``), with the crawl
politeness the scenario scales and a middleware counting how each delivered message ended.

  python -m testkit.kb_workers --tier slow --threads 8     # what start_workers spawns
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.child_process import ROOT, child_env

#: Read by the worker entry only: the crawl politeness rule per host, ``LIMIT/SECONDS``.
HOST_RATE_ENV = "KB_SCENARIO_CRAWL_HOST_RATE"


def environment_of(values: dict[str, Any]) -> dict[str, str]:
    """The same settings as the environment variables a child process reads."""
    from shared.config import environment_variables

    variables = environment_variables()
    env = {}
    for name, value in values.items():
        env[variables[name]] = (
            json.dumps(value)
            if isinstance(value, dict)
            else str(value).lower()
            if isinstance(value, bool)
            else str(value)
        )
    return env


_PROBLEM = re.compile(r"^\S+ \S+ (ERROR|CRITICAL) ")


@dataclass
class WorkerProcess:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def problems(self) -> list[str]:
        """The ERROR and CRITICAL lines of its log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if _PROBLEM.match(line)]

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def start_workers(
    pool: Sequence[tuple[str, int]], env: dict[str, str], host_rate: str, log_dir: Path
) -> list[WorkerProcess]:
    """Spawn a worker process for each (tier, threads) of ``pool``, with the settings of
    ``env`` and the crawl politeness ``host_rate``: ``python -m testkit.kb_workers``."""
    environment = child_env({**env, HOST_RATE_ENV: host_rate})
    workers = []
    counts: Counter[str] = Counter()
    for tier, threads in pool:
        name = f"{tier}-{counts[tier]}"
        counts[tier] += 1
        log_path = log_dir / f"worker-{name}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "testkit.kb_workers",
                    "--tier",
                    tier,
                    "--threads",
                    str(threads),
                ],
                cwd=ROOT,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        workers.append(WorkerProcess(name, process, log_path))
    return workers


def stop_workers(workers: Sequence[WorkerProcess], timeout: float = 20.0) -> None:
    """SIGTERM each worker this module started (they drain), then SIGKILL stragglers."""
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for worker in workers:
        try:
            worker.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait(timeout=10)


def scale_politeness(rate: str) -> None:
    """Make the crawler's per-host politeness rule ``rate`` in this process (before
    bootstrap: ``register`` looks ``HostPoliteness`` up when it builds the fetcher)."""
    from services.web import politeness
    from shared.config import parse_rate
    from tiers.policies import WindowRule

    rule = WindowRule(*parse_rate(rate, field=HOST_RATE_ENV))
    production = politeness.HostPoliteness

    class ScaledPoliteness(production):  # type: ignore[misc, valid-type]
        def __init__(self, windows: Any, rule: WindowRule = rule) -> None:
            super().__init__(windows, rule)

    politeness.HostPoliteness = ScaledPoliteness  # type: ignore[misc]


def outcome_counter(client: Any, namespace: str) -> Any:
    """A middleware counting, per actor, how each delivered message ended, into the hash
    ``<ns>:e2e:outcomes`` (``<actor>|<outcome>`` -> count), and the runs each provider
    window admitted, into ``<ns>:e2e:window_runs`` (``<window key>#<index>`` -> runs, from
    the ``st_window`` the windows middleware puts on a run it admits)."""
    from dramatiq.middleware import Middleware

    from shared.errors import Delay
    from tiers.middleware.held import Held
    from tiers.options import WINDOW_ADMITTED

    key = f"{namespace}:e2e:outcomes"
    runs_key = f"{namespace}:e2e:window_runs"

    class OutcomeCounter(Middleware):
        def after_process_message(
            self, broker: Any, message: Any, *, result: Any = None, exception: Any = None
        ) -> None:
            if exception is None:
                outcome = "completed"
            elif isinstance(exception, Held):
                inner = exception.outcome
                reason = getattr(inner, "reason", None)
                outcome = f"held:{reason}" if reason else f"held:{type(inner).__name__}"
            elif isinstance(exception, Delay):
                outcome = f"delayed:{exception.reason}"
            else:
                outcome = f"raised:{type(exception).__name__}"
            client.hincrby(key, f"{message.actor_name}|{outcome}", 1)
            window = message.options.get(WINDOW_ADMITTED)
            if window and not isinstance(exception, Held):
                client.hincrby(runs_key, window, 1)

        def after_skip_message(self, broker: Any, message: Any) -> None:
            client.hincrby(key, f"{message.actor_name}|skipped", 1)

    return OutcomeCounter()


def worker_main(tier: str, threads: int) -> None:
    """A worker process of the scenario: the production platform from the environment
    (``bootstrap()``), the scaled crawl politeness, and the outcome counter."""
    rate = os.environ.get(HOST_RATE_ENV)
    if rate:
        scale_politeness(rate)
    from services.app.bootstrap import bootstrap
    from tiers.worker import serve

    platform = bootstrap(component=f"worker-{tier}")
    settings = platform.settings
    platform.broker.add_middleware(
        outcome_counter(platform.broker.client, settings.redis_namespace)
    )
    serve(
        platform.broker,
        platform.registry.queues_of_tier(tier),
        threads=threads,
        prefetch=settings.queue_prefetch,
        drain_seconds=settings.worker_drain_seconds,
        poll_ms=settings.worker_poll_ms,
    )
    platform.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.kb_workers")
    parser.add_argument("--tier", required=True, choices=("fast", "slow", "maintenance"))
    parser.add_argument("--threads", type=int, default=4)
    options = parser.parse_args(argv)
    worker_main(options.tier, options.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
