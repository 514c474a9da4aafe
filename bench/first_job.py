"""Scale-out speed: how long a new worker process takes to start a job that already waits,
which is what KEDA's scale-from-zero waits for.

  python -m bench.first_job                  # 7 interleaved rounds
  python -m bench.first_job --rounds 11
  python -m bench.first_job --only speedtier_pool --only dramatiq
  python -m bench.first_job --only speedtier_pool --baseline ../old-checkout   # before/after
  python -m bench.first_job --quick          # 2 rounds (a smoke run, not a result)

Each round starts each system once, in an order that rotates from round to round, with one
job waiting in its queue on the same Redis:

- **speedtier pool**: ``speedtier worker --tier fast --processes 2 --threads 8``, the
  command the Helm chart runs for the fast tier (a pool parent and its two children), in
  ``SPEEDTIER_ENV=production`` on a migrated database, ``/metrics`` on a free port; the job
  is an ``ingest_document`` of a document that does not exist (it completes as
  record-missing);
- **speedtier, one process**: the same with ``--processes 1`` (the slow and maintenance
  tiers' shape: no pool parent);
- **raw Dramatiq**: ``dramatiq bench.first_job_app --processes 2 --threads 8`` (a plain
  ``RedisBroker``, a no-op actor);
- **raw Dramatiq with the first job's libraries**: the same, its module also importing
  :data:`LIBRARIES`, the third-party libraries speedtier's worker has loaded when its
  first job starts and which that job needs (the Redis client, the settings' pydantic,
  SQLAlchemy's engine with the psycopg dialect, the driver, the metrics client). It is the
  floor of a Python worker on Dramatiq that loads them before its first job: what the
  platform's own start adds is its time over this one's (each round's ratio of a speedtier
  worker's first job to the floor's is reported too: the host's speed moves it less than it
  moves the seconds);
- **BullMQ**: ``node bench/bullmq/first_job.mjs work`` (one Worker, concurrency 8), skipped
  with a message when ``node`` or ``npm`` is missing (``bench.bullmq_compare`` installs it).

Measured: from just before the command is spawned to its handler's start
(``bench.worker_start``: Dramatiq's ``Received args=...`` debug line, so both Python systems
log at DEBUG, which costs speedtier's start 5 to 20 ms more than ``LOG_LEVEL=INFO``). For the
speedtier pool, the medians of its phases from the spawn: first child started, first message
fetched, the worker's threads all started, the run started (``start.lua``'s ``started_at``
on the job record) and settled (its ``finished_at``: the first job, done). One start of each
system before the rounds is not counted (it compiles the bytecode). ``--baseline DIR`` adds
the pool and the lone process of another checkout of speedtier (the code before a change),
in the same rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.bullmq_compare import DIRECTORY as BULLMQ_DIRECTORY
from bench.bullmq_compare import ensure_bullmq, node_missing
from bench.common import (
    BENCH_CREDENTIALS_KEY,
    REDIS_URL,
    connect,
    delete_namespace,
    interrupt_on_sigterm,
    machine,
    markdown_table,
    new_namespace,
    rnd,
    verdict,
    write_result,
)
from bench.worker_start import (
    ROOT,
    Start,
    first_job_seconds,
    parse_bullmq_line,
    parse_dramatiq_line,
    parse_json_line,
    python_env,
    start,
)
from testkit.ports import free_port

NAME = "first_job"
TARGET_SECONDS = 0.5
#: What "raw Dramatiq with the first job's libraries" imports (see the module's text).
LIBRARIES = (
    "redis",
    "pydantic_settings",
    "sqlalchemy.dialects.postgresql.psycopg",
    "psycopg",
    "prometheus_client",
)
PROCESSES, THREADS = 2, 8
ORGANIZATION = 1
#: The bench's credentials key and an internal token strong enough for production.
TOKEN = "bench-first-job-q8Wv3Ln6Rt1Yc5Hm9Kd2Xp7Bz4Js0Fg"
#: speedtier's start, phase by phase: (phase, logger suffix, message start) of log lines.
PHASES = (
    ("first child started", "worker_pool", "fast: started fast-0"),
    ("first message fetched", "", "Pushing message"),
    ("worker threads started", "tiers.worker", "worker consuming"),
)
SYSTEMS = ("speedtier_pool", "speedtier_one", "dramatiq", "dramatiq_libraries", "bullmq")
BASELINES = ("baseline_pool", "baseline_one")
LABELS = {
    "speedtier_pool": "speedtier pool (fast tier: 2 processes x 8 threads)",
    "speedtier_one": "speedtier, one process (`--processes 1`)",
    "baseline_pool": "baseline checkout: pool",
    "baseline_one": "baseline checkout: one process",
    "dramatiq": "raw Dramatiq (`dramatiq --processes 2 --threads 8`)",
    "dramatiq_libraries": "raw Dramatiq importing the first job's libraries",
    "bullmq": "BullMQ on Node (one Worker, concurrency 8)",
}


def phases(started: Start) -> dict[str, float]:
    """Seconds from the spawn to each phase of speedtier's start that its log shows."""
    found: dict[str, float] = {}
    for name, logger, message in PHASES:
        for stamp, line_logger, line in started.lines:
            if line_logger.endswith(logger) and line.startswith(message):
                found[name] = rnd(stamp - started.spawned_at)
                break
    return found


class Speedtier:
    """The platform's side: a migrated database, a namespace, and the router that enqueues
    the waiting job of each start."""

    def __init__(self, redis_url: str) -> None:
        from services.app.bootstrap import bootstrap
        from shared.config import load_settings
        from testkit.kb_workers import environment_of
        from testkit.scenario_database import create_database, server_database_url

        self.server_url = server_database_url()
        self.database_url = create_database(self.server_url)
        self.namespace = new_namespace(NAME)
        self.values: dict[str, Any] = {
            "environment": "production",
            "internal_api_token": TOKEN,
            "connector_credentials_key": BENCH_CREDENTIALS_KEY,
            "allow_volatile_redis": True,  # the benchmark's Redis keeps no AOF
            "redis_url": redis_url,
            "database_url": self.database_url,
            "redis_namespace": self.namespace,
        }
        self.platform = bootstrap(load_settings(**self.values), component="bench-first-job")
        self.env = environment_of(self.values)
        self.documents = iter(range(1_000_000, 2_000_000))

    def measure(self, processes: int, root: Path = ROOT) -> dict[str, Any]:
        """One start of ``root``'s worker command (this checkout's by default)."""
        from services.ingestion.families import ingest_job_id, ingest_request

        document = next(self.documents)
        self.platform.router.enqueue(ingest_request(ORGANIZATION, document))
        jobs = self.platform.brokers.of_tier("fast").jobs
        job_id = ingest_job_id(document)
        waiting = jobs.record(job_id) or {}
        if waiting.get("state") != "waiting":  # parked behind a slot a previous run kept
            raise RuntimeError(f"the job does not wait in its queue: {waiting}")
        env = python_env(
            {
                **self.env,
                "LOG_LEVEL": "DEBUG",
                "SPEEDTIER_LOG_FORMAT": "json",
                "SPEEDTIER_METRICS_PORT": str(free_port()),
            },
            root,
        )
        binary = str(Path(sys.executable).with_name("speedtier"))
        command = [binary, "worker", "--tier", "fast", "--processes", str(processes)]
        started = start([*command, "--threads", str(THREADS)], env, parse_json_line)
        seconds = first_job_seconds(started)
        record = jobs.record(job_id) or {}
        run = {
            name: rnd(int(record[field]) / 1000 - started.spawned_at)
            for name, field in (("run_started", "started_at"), ("settled", "finished_at"))
            if record.get(field)
        }
        return {"seconds": rnd(seconds), **phases(started), **run, "state": record.get("state")}

    def close(self) -> None:
        from testkit.scenario_database import drop_database

        self.platform.close()
        client = connect(self.platform.settings.redis_url or REDIS_URL)
        delete_namespace(client, self.namespace)
        client.close()
        drop_database(self.server_url, self.database_url)


def dramatiq_measure(redis_url: str, libraries: Sequence[str] = ()) -> dict[str, Any]:
    """Raw Dramatiq's worker command with one job waiting on a namespace of its own, its
    module importing ``libraries`` too."""
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    from bench.first_job_app import QUEUE

    namespace = new_namespace(f"{NAME}-dramatiq")
    broker = RedisBroker(url=redis_url, namespace=namespace)  # type: ignore[no-untyped-call]
    actor = dramatiq.actor(broker=broker, actor_name="first_job", queue_name=QUEUE)(_noop)
    actor.send(item="first")
    broker.close()
    env = python_env(
        {
            "FIRST_JOB_REDIS_URL": redis_url,
            "FIRST_JOB_NAMESPACE": namespace,
            "FIRST_JOB_LIBRARIES": ",".join(libraries),
        }
    )
    binary = str(Path(sys.executable).with_name("dramatiq"))
    command = [binary, "bench.first_job_app", "--processes", str(PROCESSES)]
    started = start([*command, "--threads", str(THREADS), "--verbose"], env, parse_dramatiq_line)
    try:
        return {"seconds": rnd(first_job_seconds(started))}
    finally:
        client = connect(redis_url)
        delete_namespace(client, namespace)
        client.close()


def _noop(item: str) -> None:
    """The enqueuing side's copy of the raw actor (never run here)."""


def bullmq_measure(redis_url: str) -> dict[str, Any]:
    """BullMQ's Worker in a new Node process with one job waiting in a fresh queue."""
    queue = new_namespace(f"{NAME}-bullmq")
    script = ["node", "first_job.mjs"]
    subprocess.run([*script, "add", redis_url, queue], cwd=BULLMQ_DIRECTORY, check=True, timeout=60)
    started = start(
        [*script, "work", redis_url, queue],
        dict(os.environ),
        parse_bullmq_line,
        stream="stdout",
        cwd=BULLMQ_DIRECTORY,
    )
    return {"seconds": rnd(first_job_seconds(started))}


def spread(values: Sequence[float]) -> dict[str, float]:
    return {
        "median": rnd(statistics.median(values)),
        "min": rnd(min(values)),
        "max": rnd(max(values)),
    }


def run(
    *,
    quick: bool = False,
    redis_url: str = REDIS_URL,
    rounds: int | None = None,
    only: Sequence[str] = (),
    baseline: Path | None = None,
) -> dict[str, Any]:
    """Every system (or ``only`` these, and the ``baseline`` checkout's) once per round, the
    order rotating; one uncounted start of each first."""
    rounds = rounds or (2 if quick else 7)
    client = connect(redis_url)
    info = machine(client)
    client.close()
    skipped = node_missing() if not only or "bullmq" in only else None
    if skipped is None and (not only or "bullmq" in only):
        ensure_bullmq()
    systems = [s for s in SYSTEMS if (not only or s in only) and (s != "bullmq" or not skipped)]
    systems += list(BASELINES) if baseline else []
    speedtier = Speedtier(redis_url)
    measures: dict[str, Callable[[], dict[str, Any]]] = {
        "speedtier_pool": lambda: speedtier.measure(PROCESSES),
        "speedtier_one": lambda: speedtier.measure(1),
        "baseline_pool": lambda: speedtier.measure(PROCESSES, baseline or ROOT),
        "baseline_one": lambda: speedtier.measure(1, baseline or ROOT),
        "dramatiq": lambda: dramatiq_measure(redis_url),
        "dramatiq_libraries": lambda: dramatiq_measure(redis_url, LIBRARIES),
        "bullmq": lambda: bullmq_measure(redis_url),
    }
    samples: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    loads: list[float] = []
    try:
        for system in systems:  # compiles the bytecode, warms the page cache
            measures[system]()
        for number in range(rounds):
            shift = number % len(systems)
            for system in systems[shift:] + systems[:shift]:
                loads.append(rnd(os.getloadavg()[0], 2))
                samples[system].append({**measures[system](), "load": loads[-1]})
            print(f"<!-- round {number + 1} of {rounds} done -->", file=sys.stderr, flush=True)
    finally:
        speedtier.close()
    results = {s: spread([m["seconds"] for m in samples[s]]) for s in systems}
    settled = {s: [m["settled"] for m in samples[s] if "settled" in m] for s in systems}
    done = {s: spread(values) for s, values in settled.items() if values}
    floor = [m["seconds"] for m in samples.get("dramatiq_libraries", [])]
    to_floor = {
        system: spread([m["seconds"] / f for m, f in zip(samples[system], floor, strict=True)])
        for system in systems
        if floor and system in ("speedtier_pool", "speedtier_one", *BASELINES)
    }
    breakdown = {
        key: rnd(statistics.median(values))
        for key in (*(p[0] for p in PHASES), "run_started", "settled")
        if (values := [m[key] for m in samples.get("speedtier_pool", []) if key in m])
    }
    return {
        "machine": info,
        "settings": {
            "rounds": rounds,
            "processes": PROCESSES,
            "threads": THREADS,
            "baseline": str(baseline) if baseline else None,
        },
        "skipped": {"bullmq": skipped} if skipped else {},
        "results": results,
        "first_job_done": done,
        "to_floor": to_floor,
        "speedtier_pool_phases": breakdown,
        "samples": samples,
        "load_averages": {"min": min(loads), "max": max(loads)},
        "targets": {
            f"{key}_met": results[system]["median"] <= TARGET_SECONDS
            for system, key in (("speedtier_pool", "pool"), ("speedtier_one", "one_process"))
            if system in results
        },
    }


def summary(result: dict[str, Any]) -> str:
    results, targets = result["results"], result["targets"]
    rows = []
    for system, figures in results.items():
        mark = ""
        key = {"speedtier_pool": "pool_met", "speedtier_one": "one_process_met"}.get(system)
        if key:
            mark = f" (target <= {TARGET_SECONDS} s: {verdict(targets[key])})"
        done = result["first_job_done"].get(system)
        rows.append(
            [
                LABELS[system],
                f"**{figures['median']:.3f}**{mark}",
                f"{figures['min']:.3f} - {figures['max']:.3f}",
                f"{done['median']:.3f}" if done else "",
            ]
        )
    phases_row = ", ".join(f"{k} {v:.3f} s" for k, v in result["speedtier_pool_phases"].items())
    loads = result["load_averages"]
    lines = [
        "### First job of a new worker\n",
        f"Seconds from spawning the worker command to its handler starting a job that was "
        f"already waiting; median and range of {result['settings']['rounds']} interleaved "
        f"rounds, load average {loads['min']}-{loads['max']} during the run.\n",
        markdown_table(
            ["worker", "first job (s), median", "range (s)", "first job done (s), median"], rows
        ),
    ]
    if phases_row:
        lines.append(f"\nspeedtier pool, medians from the spawn: {phases_row}.")
    if result["to_floor"]:
        ratios = "; ".join(
            f"{LABELS[system]} {r['median']:.2f}x ({r['min']:.2f} - {r['max']:.2f})"
            for system, r in result["to_floor"].items()
        )
        lines.append(
            f"\nOver the floor ({LABELS['dramatiq_libraries']}), each round's ratio, median "
            f"and range: {ratios}."
        )
    lines += [f"\n{name}: {why}." for name, why in result["skipped"].items()]
    lines.append(f"\n_Results in bench/results/{NAME}.json._")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m bench.{NAME}", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2 rounds (a smoke run)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 7)")
    parser.add_argument("--only", action="append", choices=SYSTEMS, help="only these systems")
    parser.add_argument(
        "--baseline", type=Path, help="another speedtier checkout to measure beside this one"
    )
    parser.add_argument("--redis-url", help="Redis to use (default: BENCH_REDIS_URL or db 14)")
    options = parser.parse_args(argv)
    interrupt_on_sigterm()
    result = run(
        quick=options.quick,
        redis_url=options.redis_url or REDIS_URL,
        rounds=options.rounds,
        only=options.only or (),
        baseline=options.baseline.resolve() if options.baseline else None,
    )
    write_result(NAME, result)
    print(summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
