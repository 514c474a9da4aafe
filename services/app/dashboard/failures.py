"""The Failed page's data: every dead letter with its job's organization, family, queue and
error class, filtered, grouped by error class and paged.

A dead letter is read with its message (for the job id) and its job's record (for the
organization, family and last error) in pipelined round trips, at most :data:`MAX_LETTERS`
of the newest across the queues. The error class is the last error's type name (the text
before its first ``:``: ``Retryable``, ``Unrecoverable``, ``DelaysExhausted``...).

=========  =====================================================================
filter     matches
=========  =====================================================================
``org``    the job's organization id, exactly
``family`` the family, exactly
``queue``  the queue, exactly
``error``  the error class, exactly
``since``  failed within the last N hours (:data:`SINCE_HOURS`; absent: any time)
=========  =====================================================================

Bulk retry and discard act on the set a filter chooses (every page of it), and only on its
actionable letters (a record failed on that very message).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from dramatiq.message import Message

from services.app.bootstrap import Platform
from tiers.dead_letters import DeadLetters
from tiers.job_store import as_text
from tiers.options import JOB_ID

MAX_LETTERS = 5000
PAGE_SIZE = 50
SINCE_HOURS = (1, 6, 24, 72, 168)
FILTERS = ("org", "family", "queue", "error", "since")


@dataclass(frozen=True)
class Failure:
    """One dead letter as the page shows it."""

    queue: str
    redis_id: str
    job_id: str
    failed_at_ms: int
    org: str
    family: str
    error: str
    error_class: str
    actionable: bool
    record_expired: bool


def error_class(error: str) -> str:
    name = error.partition(":")[0].strip()
    return name if name and name.isidentifier() else "(unknown)"


def all_failures(platform: Platform) -> list[Failure]:
    """Every dead letter (the newest :data:`MAX_LETTERS`), newest first."""
    queues = sorted({q for family in platform.registry for q in family.queues()})
    found: list[Failure] = []
    for broker, tiers in platform.brokers.serving():
        mine = [queue for queue in queues if queue.rpartition(".")[2] in tiers]
        found += _failures_of(DeadLetters(broker.jobs), mine)
    found.sort(key=lambda f: f.failed_at_ms, reverse=True)
    return found[:MAX_LETTERS]


def _failures_of(letters: DeadLetters, queues: list[str]) -> list[Failure]:
    client = letters.client
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        pipe.zrevrange(letters.xq_key(queue), 0, MAX_LETTERS - 1, withscores=True)
    entries = [
        (queue, as_text(member), int(score))
        for queue, members in zip(queues, pipe.execute(), strict=True)
        for member, score in members
    ]
    pipe = client.pipeline(transaction=False)
    for queue, redis_id, _at in entries:
        pipe.hget(f"{letters.xq_key(queue)}.msgs", redis_id)
    job_ids = [_job_id(data) for data in pipe.execute()]
    pipe = client.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.hmget(
            letters.jobs.record_key(job_id or "-"), "state", "cur", "org", "family", "last_error"
        )
    failures = []
    for (queue, redis_id, at), job_id, fields in zip(entries, job_ids, pipe.execute(), strict=True):
        state, cur, org, family, error = (as_text(v) if v is not None else "" for v in fields)
        failures.append(
            Failure(
                queue=queue,
                redis_id=redis_id,
                job_id=job_id,
                failed_at_ms=at,
                org=org,
                family=family or queue.rpartition(".")[0],
                error=error,
                error_class=error_class(error) if error else "(record expired)",
                actionable=bool(job_id) and state == "failed" and cur == redis_id,
                record_expired=not state,
            )
        )
    return failures


def _job_id(data: Any) -> str:
    if data is None:
        return ""
    try:
        job_id = Message.decode(data).options.get(JOB_ID)
    except Exception:  # an undecodable message was dead-lettered for being one
        return ""
    return job_id if isinstance(job_id, str) else ""


def clean_filters(args: Any) -> dict[str, str]:
    """The filters of a request's arguments (unknown ones and empty values dropped)."""
    chosen = {name: str(args.get(name, "")).strip()[:200] for name in FILTERS}
    if chosen["since"] and not (chosen["since"].isdigit() and int(chosen["since"]) in SINCE_HOURS):
        chosen["since"] = ""
    return {name: value for name, value in chosen.items() if value}


def matching(
    failures: list[Failure], filters: dict[str, str], now: float | None = None
) -> list[Failure]:
    since = filters.get("since")
    oldest_ms = ((time.time() if now is None else now) - int(since) * 3600) * 1000 if since else 0
    return [
        f
        for f in failures
        if f.failed_at_ms >= oldest_ms
        and filters.get("org", f.org) == f.org
        and filters.get("family", f.family) == f.family
        and filters.get("queue", f.queue) == f.queue
        and filters.get("error", f.error_class) == f.error_class
    ]


def by_error_class(failures: list[Failure]) -> list[tuple[str, int]]:
    return Counter(f.error_class for f in failures).most_common()


def describe(filters: dict[str, str]) -> str:
    """A filter as the audit keeps it: ``org=7 error=Retryable`` (``all failed`` if none)."""
    return " ".join(f"{name}={value}" for name, value in sorted(filters.items())) or "all failed"


@dataclass(frozen=True)
class Page:
    rows: list[Failure]
    number: int
    pages: int
    total: int


def page_of(failures: list[Failure], number: int) -> Page:
    pages = max(1, -(-len(failures) // PAGE_SIZE))
    number = min(max(1, number), pages)
    start = (number - 1) * PAGE_SIZE
    return Page(failures[start : start + PAGE_SIZE], number, pages, len(failures))
