"""The Busy page's data: each running job with its organization, family, worker and time
running, and the jobs holding a group's slots.

Running jobs are what each live worker published (``tiers.cancellation.live_workers``: host,
pid and the jobs its threads run, refreshed within a second of a change), joined to each
job's record for its organization, family, attempt and cancel. A group's holders are the
members of its slot set (``<ns>:group:<queue>|<org>``): running, or admitted and waiting in
the queue.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from services.app.bootstrap import Platform
from tiers.cancellation import live_workers
from tiers.job_store import as_text

_FIELDS = ("state", "org", "family", "queue", "attempts", "failures", "started_at", "cancel_by")


@dataclass(frozen=True)
class RunningJob:
    job_id: str
    state: str
    org: str
    family: str
    queue: str
    worker: str  # "host pid N", or "" when no live worker says it runs the job
    started_ms: int
    attempt: int  # this run's number (runs ended before it, plus one)
    cancel_by: str

    @property
    def elapsed(self) -> float:
        return max(0.0, time.time() - self.started_ms / 1000) if self.started_ms else 0.0

    @property
    def tier(self) -> str:
        return self.queue.rpartition(".")[2]


def running_jobs(platform: Platform, org: str | None = None) -> list[RunningJob]:
    """Every job a live worker runs (only ``org``'s when given), longest running first."""
    ns = platform.settings.redis_namespace
    timeout_ms = int(platform.settings.heartbeat_timeout_seconds * 1000)
    jobs: list[RunningJob] = []
    for broker, _tiers in platform.brokers.serving():
        workers, _unknown = live_workers(broker.client, ns, timeout_ms)
        runs = [
            (str(run.get("job", "")), f"{w.host} pid {w.pid}", int(run.get("started_ms", 0)))
            for w in workers
            for run in w.running
        ]
        jobs += _with_records(broker, runs)
    if org is not None:
        jobs = [job for job in jobs if job.org == org]
    return sorted(jobs, key=lambda job: job.started_ms)


def worker_of(platform: Platform, job_id: str) -> str:
    """``host pid N`` of the live worker running ``job_id`` ("" when none says it does)."""
    broker = platform.brokers.broker_of_job(job_id)
    ns = platform.settings.redis_namespace
    timeout_ms = int(platform.settings.heartbeat_timeout_seconds * 1000)
    workers, _unknown = live_workers(broker.client, ns, timeout_ms)
    for worker in workers:
        if any(run.get("job") == job_id for run in worker.running):
            return f"{worker.host} pid {worker.pid}"
    return ""


def group_holders(platform: Platform, group_key: str) -> list[RunningJob]:
    """The jobs holding slots of group ``group_key`` (``<queue>|<org>``)."""
    queue = group_key.partition("|")[0]
    broker = platform.brokers.of_queue(queue)
    ns = platform.settings.redis_namespace
    replies: Any = broker.client.zrange(f"{ns}:group:{group_key}", 0, -1)
    members = [as_text(m) for m in replies]
    timeout_ms = int(platform.settings.heartbeat_timeout_seconds * 1000)
    workers, _unknown = live_workers(broker.client, ns, timeout_ms)
    where = {
        str(run.get("job")): (f"{w.host} pid {w.pid}", int(run.get("started_ms", 0)))
        for w in workers
        for run in w.running
    }
    runs = [(job_id, *where.get(job_id, ("", 0))) for job_id in members]
    return _with_records(broker, runs)


def _with_records(broker: object, runs: list[tuple[str, str, int]]) -> list[RunningJob]:
    jobs_store = broker.jobs  # type: ignore[attr-defined]
    pipe = jobs_store.client.pipeline(transaction=False)
    for job_id, _worker, _started in runs:
        pipe.hmget(jobs_store.record_key(job_id), *_FIELDS)
    found = []
    for (job_id, worker, started), values in zip(runs, pipe.execute(), strict=True):
        record = dict(
            zip(_FIELDS, (as_text(v) if v is not None else "" for v in values), strict=True)
        )
        started_ms = started or (int(record["started_at"]) if record["started_at"].isdigit() else 0)
        found.append(
            RunningJob(
                job_id=job_id,
                state=record["state"] or "gone",
                org=record["org"],
                family=record["family"],
                queue=record["queue"],
                worker=worker,
                started_ms=started_ms if record["state"] == "active" else 0,
                attempt=int(record["attempts"] or 0) + 1,
                cancel_by=record["cancel_by"],
            )
        )
    return found
