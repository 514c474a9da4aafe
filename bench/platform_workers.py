"""Worker processes of the production platform for the end-to-end benchmarks (super sources,
connectors): the settings they run with, their start and stop, the worker entry, the load
average while they run, and the API's app behind a real HTTP server.

  python -m bench.platform_workers --tier fast --threads 12     # what start_workers spawns
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def settings_values(redis_url: str, database_url: str, namespace: str) -> dict[str, Any]:
    """The settings (field name -> value) every process of a run has: test environment,
    loopback egress for the fakes, the bench's credentials key, a 50 ms poll."""
    from bench.common import BENCH_CREDENTIALS_KEY

    return {
        "environment": "test",
        "egress_allowed_networks": "127.0.0.1/32",  # the fakes listen on loopback
        "connector_credentials_key": BENCH_CREDENTIALS_KEY,
        "redis_url": redis_url,
        "database_url": database_url,
        "redis_namespace": namespace,
        "log_level": "WARNING",
        "http_timeout_seconds": 15.0,
        "worker_poll_ms": 50,
        "worker_drain_seconds": 5,
        "flag_cache_seconds": 5.0,
        "metrics_port": 0,
    }


def worker_main(tier: str, threads: int) -> None:
    """A worker process: the production platform from the environment, one tier's queues."""
    from services.app.bootstrap import bootstrap
    from tiers.worker import serve

    platform = bootstrap(component=f"worker-{tier}")
    serve(
        platform.broker,
        platform.registry.queues_of_tier(tier),
        threads=threads,
        poll_ms=50,
        drain_seconds=5,
    )


def start_workers(
    env: dict[str, str], processes: int, threads: int, log_dir: Path, tier: str = "fast"
) -> list[tuple[subprocess.Popen[bytes], Any]]:
    """Spawn ``processes`` worker processes of ``tier`` with the settings of ``env``, each
    logging to ``log_dir``: ``python -m bench.platform_workers``."""
    child_env = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    started = []
    for n in range(processes):
        log = (log_dir / f"worker-{tier}-{n}.log").open("wb")
        command = [sys.executable, "-m", "bench.platform_workers", "--tier", tier]
        command += ["--threads", str(threads)]
        started.append(
            (subprocess.Popen(command, env=child_env, stdout=log, stderr=log, cwd=ROOT), log)
        )
    return started


def stop_workers(workers: list[tuple[subprocess.Popen[bytes], Any]]) -> list[int]:
    """SIGTERM each worker (they drain), SIGKILL one still running after 30 s; exit codes."""
    for process, _log in workers:
        if process.poll() is None:
            process.terminate()
    codes = []
    for process, log in workers:
        try:
            codes.append(process.wait(timeout=30))
        except subprocess.TimeoutExpired:
            process.kill()
            codes.append(process.wait(timeout=10))
        log.close()
    return codes


class ApiThread:
    """The API's Flask app behind a threaded werkzeug server on 127.0.0.1 (real HTTP)."""

    def __init__(self, app: Any) -> None:
        from werkzeug.serving import make_server

        self._server = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


class LoadSampler:
    """The 1-minute load average every 5 s while the run goes."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(5.0)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def summary(self) -> dict[str, float | None]:
        if not self.samples:
            return {"min": None, "mean": None, "max": None}
        return {
            "min": round(min(self.samples), 1),
            "mean": round(sum(self.samples) / len(self.samples), 1),
            "max": round(max(self.samples), 1),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.platform_workers")
    parser.add_argument("--tier", default="fast")
    parser.add_argument("--threads", type=int, default=12)
    args = parser.parse_args(argv)
    worker_main(args.tier, args.threads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
