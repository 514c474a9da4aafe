"""``Router.enqueue``: the only door into the queues."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from dramatiq.message import Message

from router.registry import Registry
from router.requests import JobRequest, RoutedJob, route, route_all
from shared.errors import (
    EnqueueOutcomeUnknown,
    QueueFull,
    QueueUnavailable,
    ValidationFailed,
    WindowFull,
)
from shared.observability import warn
from tiers.broker import TierBroker
from tiers.job_store import EnqueueResult
from tiers.options import (
    GROUP,
    GROUP_CAP,
    JOB_ID,
    KEEP_FINISHED,
    ORGANIZATION,
    PROVIDER,
    WINDOW_SCOPE,
)
from tiers.rate_window import WindowGuard
from tiers.redis_retry import REDIS_DOWN
from tiers.script_send import OutcomeUnknown
from tiers.tier_brokers import TierBrokers

log = logging.getLogger(__name__)

#: Requests per pipelined round trip.
BATCH_SIZE = 500
#: How a lone request's fields are named in its errors (as :func:`route_all` names them).
SINGLE_PREFIX = "requests[0]."


def new_message_id() -> str:
    """A random (version 4) UUID as text, what Dramatiq's ``generate_unique_id`` gives
    (``str(uuid.uuid4())``), from the same 16 random bytes without building a ``UUID``
    object: about a third of its cost, paid once per enqueued message."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40
    raw[8] = raw[8] & 0x3F | 0x80
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


@dataclass(frozen=True)
class Enqueued:
    """The answer for one request: its job id, queue and outcome (added, replaced or
    deduplicated)."""

    job_id: str
    outcome: str
    queue: str
    kind: str


class Router:
    """Validates requests, resolves family -> tier -> queue and job id, and enqueues through
    the identity script.

    Parameters:
      registry: the registered families.
      brokers: each tier's broker (a job goes to its tier's Redis), or one broker for all.
    """

    def __init__(self, registry: Registry, brokers: TierBrokers | TierBroker) -> None:
        self.registry = registry
        self.brokers = brokers if isinstance(brokers, TierBrokers) else TierBrokers(brokers)
        #: The control broker (every tier's, on one Redis).
        self.broker = self.brokers.control

    def message_for(self, job: RoutedJob) -> Message[Any]:
        """The Dramatiq message of a routed job."""
        options: dict[str, Any] = {
            JOB_ID: job.job_id,
            ORGANIZATION: str(job.organization_id or ""),
        }
        group = job.family.group_key(job.organization_id or 0, job.tier)
        if group is not None:
            options[GROUP], options[GROUP_CAP] = group
        if job.family.keep_finished:
            options[KEEP_FINISHED] = True
        if job.provider:
            options[PROVIDER] = job.provider
        if job.family.window_scope is not None:
            options[WINDOW_SCOPE] = job.family.window_scope(job.organization_id or 0, job.params)
        kwargs = job.params.model_dump(mode="json")
        if job.family.tenant_scoped:
            kwargs["organization_id"] = job.organization_id
        return Message(
            queue_name=job.queue,
            actor_name=job.family.name,
            args=(),
            kwargs=kwargs,
            options=options,
            message_id=new_message_id(),
        )

    def enqueue(self, request: JobRequest) -> Enqueued:
        """Enqueue one request. Raises ValidationFailed or QueueUnavailable."""
        return self.enqueue_many([request])[0]

    def enqueue_many(
        self, requests: Sequence[JobRequest], guard: WindowGuard | None = None
    ) -> list[Enqueued]:
        """Validate all requests first (none is enqueued if any is invalid), then enqueue
        them in pipelined batches of ``BATCH_SIZE``.

        ``guard`` is a window on the control Redis that the call goes ahead under
        (``tiers.rate_window.WindowGuard``), checked before anything is enqueued: by the
        enqueue script itself when the first round trip goes to the control Redis, else read
        alone first.

        Raises:
          ValidationFailed: with ``requests[i].field`` messages; nothing was enqueued.
          QueueUnavailable: Redis did not take the jobs (unreachable, or a ``QueueFull``
            Redis out of memory); the requests it took before failing are listed in its
            ``accepted`` (none when the call was one round trip to one Redis, which is all
            or nothing), and no other was enqueued.
          EnqueueOutcomeUnknown: a QueueUnavailable whose ``unknown`` requests were sent
            and not answered: they may or may not be enqueued.
          WindowFull: ``guard``'s window is full; nothing was enqueued.
        """
        if len(requests) == 1:  # a single enqueue: one broker, no batches to cut
            job = route(self.registry, requests[0], prefix=SINGLE_PREFIX)
            return [self._enqueue_one(job, guard)]
        return self.enqueue_routed(route_all(self.registry, requests), guard)

    def _enqueue_one(self, job: RoutedJob, guard: WindowGuard | None) -> Enqueued:
        broker = self.brokers.of_tier(job.tier)
        messages = [self.message_for(job)]
        (result,) = _sent(broker, messages, {0: job}, {}, self._guard_on(broker, guard))
        return Enqueued(result.job_id, result.outcome, result.queue, job.family.kind)

    def _guard_on(self, broker: TierBroker, guard: WindowGuard | None) -> WindowGuard | None:
        """The guard a round trip to ``broker`` carries: ``guard`` itself to the control
        broker, whose Redis holds its window; to another, none, once the window was read
        alone and found open.

        Raises:
          WindowFull: read alone, the window is full.
        """
        if guard is None or broker is self.broker:
            return guard
        ends_at = guard.read()
        if ends_at is not None:
            raise WindowFull(ends_at)
        return None

    def enqueue_routed(
        self, routed: Sequence[RoutedJob], guard: WindowGuard | None = None
    ) -> list[Enqueued]:
        """Enqueue jobs already validated and routed (``route_all``), in pipelined batches.

        Each job goes to its tier's Redis: a batch spanning tiers on different Redis servers
        is one round trip (one transaction) to each. When one of them fails, the jobs
        another accepted stay accepted and the error lists them (sending them again is
        deduplicated).

        ``guard`` goes with the first round trip (as :meth:`enqueue_many`).

        Raises:
          QueueUnavailable, EnqueueOutcomeUnknown, WindowFull: as :meth:`enqueue_many`.
        """
        answers: list[Enqueued] = []
        for start in range(0, len(routed), BATCH_SIZE):
            batch = routed[start : start + BATCH_SIZE]
            results = self._enqueue_batch(batch, start, answers, guard if start == 0 else None)
            answers.extend(
                Enqueued(r.job_id, r.outcome, r.queue, job.family.kind)
                for r, job in zip(results, batch, strict=True)
            )
        return answers

    def _enqueue_batch(
        self,
        batch: Sequence[RoutedJob],
        start: int,
        before: Sequence[Enqueued],
        guard: WindowGuard | None,
    ) -> list[EnqueueResult]:
        """One transaction per Redis the batch's tiers use, the control Redis's first;
        results in batch order. ``start`` is the batch's first index in the call, ``before``
        the answers of the call's earlier batches (what a failure reports as accepted), and
        ``guard`` is checked before the first transaction."""
        by_broker: dict[int, tuple[TierBroker, list[int]]] = {id(self.broker): (self.broker, [])}
        for index, job in enumerate(batch):
            broker = self.brokers.of_tier(job.tier)
            by_broker.setdefault(id(broker), (broker, []))[1].append(index)
        accepted: dict[int, Enqueued] = dict(enumerate(before))
        results: list[EnqueueResult | None] = [None] * len(batch)
        for broker, indices in by_broker.values():
            if not indices:
                continue
            jobs = {start + i: batch[i] for i in indices}
            messages = [self.message_for(job) for job in jobs.values()]
            sent = _sent(broker, messages, jobs, accepted, self._guard_on(broker, guard))
            guard = None  # checked: the later transactions go ahead
            for index, reply in zip(indices, sent, strict=True):
                results[index] = reply
                accepted[start + index] = Enqueued(
                    reply.job_id, reply.outcome, reply.queue, batch[index].family.kind
                )
        return [result for result in results if result is not None]


def _sent(
    broker: TierBroker,
    messages: list[Message[Any]],
    jobs: Mapping[int, RoutedJob],
    accepted: Mapping[int, Enqueued],
    guard: WindowGuard | None = None,
) -> list[EnqueueResult]:
    """``broker.enqueue_identified(messages, guard)``, its Redis errors as the API's:
    ``jobs`` are the messages' jobs by index in the call, ``accepted`` what the call
    enqueued before. ``WindowFull`` (the guard's window full) passes through.

    Raises:
      EnqueueOutcomeUnknown: sent, and no answer came (``jobs`` are the unknown ones).
      QueueFull: Redis is out of memory; none of ``messages`` was enqueued.
      QueueUnavailable: Redis could not be reached or is read-only; none was enqueued.
    """
    try:
        return broker.enqueue_identified(messages, guard)
    except OutcomeUnknown as exc:
        unknown = {index: job.job_id for index, job in jobs.items()}
        raise EnqueueOutcomeUnknown(
            f"Redis did not answer the enqueue: {exc}", accepted=accepted, unknown=unknown
        ) from exc
    except redis.exceptions.OutOfMemoryError as exc:
        raise QueueFull(f"Redis is out of memory: {exc}", accepted=accepted) from exc
    except (*REDIS_DOWN, redis.exceptions.ReadOnlyError) as exc:
        raise QueueUnavailable(f"Redis did not accept the jobs: {exc}", accepted=accepted) from exc


@dataclass(frozen=True)
class Settled:
    """What a tick's fan-out did: each accepted answer and each refused request's error."""

    accepted: list[Enqueued]
    failed: list[tuple[JobRequest, str]]

    def summary(self) -> dict[str, int]:
        counts = {"added": 0, "replaced": 0, "deduplicated": 0, "failed": len(self.failed)}
        for answer in self.accepted:
            counts[answer.outcome] = counts.get(answer.outcome, 0) + 1
        return counts


def enqueue_settled(router: Router, requests: Sequence[JobRequest]) -> Settled:
    """Enqueue every request on its own account (the seeds' ``Promise.allSettled``): a batch
    is tried whole first, and when it fails each of its requests is tried alone, so one bad
    request or a passing Redis error costs only that request."""
    accepted: list[Enqueued] = []
    failed: list[tuple[JobRequest, str]] = []
    for start in range(0, len(requests), BATCH_SIZE):
        batch = list(requests[start : start + BATCH_SIZE])
        try:
            accepted.extend(router.enqueue_many(batch))
            continue
        except (ValidationFailed, QueueUnavailable):
            pass
        for request in batch:
            try:
                accepted.append(router.enqueue(request))
            except (ValidationFailed, QueueUnavailable) as exc:
                warn(
                    f"could not enqueue {request.kind}",
                    fingerprint=["speedtier", "enqueue-settled", request.kind, type(exc).__name__],
                    organization_id=request.organization_id,
                    params=dict(request.params),
                    error=str(exc),
                )
                failed.append((request, str(exc)))
    return Settled(accepted, failed)
