"""The platform's metrics after real runs in a real worker (a thread of this process, values
in memory): every outcome counted under its family, tier and label, run times observed,
window delays counted, and the scrape-time depth showing parked, ready and failed jobs."""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families

from router.enqueue import Router
from router.registry import Registry
from router.requests import JobRequest
from shared import metrics
from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.policies import WindowRule
from tiers.queue_depth import QueueDepthCollector

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def queues_of_tier(tier: str) -> list[str]:
    return sorted(q for f in h.families().values() for q in f.queues() if q.endswith(tier))


def scrape(broker: TierBroker) -> Samples:
    body, _content_type = metrics.render([QueueDepthCollector(broker, queues_of_tier)])
    return parse(body)


def parse(body: bytes) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def jobs(samples: Samples, family: str, outcome: str) -> float:
    return value(samples, "speedtier_jobs_total", family=family, tier="fast", outcome=outcome)


def test_outcomes_run_times_and_failed_depth(router: Router, broker: TierBroker) -> None:
    before = scrape(broker)
    # Given a job of each ending: returns, record missing, retried until failed, unrecoverable
    router.enqueue_many(
        [
            JobRequest("t_plain", 1, {"item": "ok"}),
            JobRequest("t_plain", 1, {"item": "gone", "mode": "missing"}),
            JobRequest("t_plain", 1, {"item": "flaky", "mode": "retryable"}),
            JobRequest("t_plain", 1, {"item": "bad", "mode": "unrecoverable"}),
        ]
    )
    # When a worker runs them to their end
    ends = {"plain-ok", "plain-gone", "plain-flaky", "plain-bad"}
    finished = {"completed", "record_missing", "failed"}
    with h.running_worker(broker):
        h.wait_until(lambda: all(h.state(broker, j) in finished for j in ends), timeout=30)
    after = scrape(broker)

    def delta(outcome: str) -> float:
        return jobs(after, "t_plain", outcome) - jobs(before, "t_plain", outcome)

    # Then each ending is counted once, the retried attempts apart (3 attempts: 2 retried)
    assert delta("completed") == 1
    assert delta("record_missing") == 1
    assert delta("retried") == 2
    assert delta("failed") == 2  # the retryable one at its last attempt, the unrecoverable
    runs = value(after, "speedtier_job_run_seconds_count", family="t_plain", tier="fast")
    assert (
        runs - value(before, "speedtier_job_run_seconds_count", family="t_plain", tier="fast") == 6
    )
    # and the two failed jobs wait in the dead-letter set, which the depth reports
    assert value(after, "speedtier_queue_depth", tier="fast", family="t_plain", state="failed") == 2
    assert value(after, "speedtier_queue_depth_up") == 1


def test_window_delays_are_counted(redis_url: str, namespace: str) -> None:
    # Given a window of 2 starts an hour (no window boundary falls within the test)
    broker = h.make_broker(redis_url, namespace, windows={"t_window.*": WindowRule(2, 3600.0)})
    registry = Registry()
    for family in h.families().values():
        registry.add(family)
    router = Router(registry, broker)
    before = scrape(broker)
    try:
        # When 8 jobs of one scope start
        router.enqueue_many(
            [JobRequest("t_window", 3, {"item": f"w{i}", "provider": "p"}) for i in range(8)]
        )
        with h.running_worker(broker):
            h.wait_until(
                lambda: (
                    sorted(h.state(broker, f"window-w{i}") or "" for i in range(8))
                    == ["completed"] * 2 + ["delayed"] * 6
                ),
                timeout=30,
            )
        after = scrape(broker)
    finally:
        broker.close()
    # Then 2 ran and the 6 that did not fit were delayed to a later window, each counted once
    labels = {"family": "t_window", "tier": "fast"}
    delays = "speedtier_window_delays_total"
    assert value(after, delays, **labels) - value(before, delays, **labels) == 6
    assert jobs(after, "t_window", "delayed") - jobs(before, "t_window", "delayed") == 6
    assert jobs(after, "t_window", "completed") - jobs(before, "t_window", "completed") == 2


def test_parked_jobs_show_in_the_depth(router: Router, broker: TierBroker) -> None:
    # Given 3 jobs of one organization in a family capped at 1 per organization, no worker
    router.enqueue_many(
        [JobRequest("t_serial", 9, {"item": f"s{i}", "sleep": 0.1}) for i in range(3)]
    )
    samples = scrape(broker)
    # Then one is admitted (ready in the queue) and two are parked in the group
    labels = {"tier": "fast", "family": "t_serial"}
    assert value(samples, "speedtier_queue_depth", state="ready", **labels) == 1
    assert value(samples, "speedtier_queue_depth", state="parked", **labels) == 2


def test_oldest_waiting_age_and_redis_memory(router: Router, broker: TierBroker) -> None:
    # Given two waiting jobs of one queue, enqueued at once, and no worker
    router.enqueue_many([JobRequest("t_plain", 4, {"item": f"o{i}"}) for i in range(2)])
    enqueued_at = time.time()

    def scrape_at(now: float) -> Samples:
        collector = QueueDepthCollector(broker, queues_of_tier, clock=lambda: now)
        body, _content_type = metrics.render([collector])
        return parse(body)

    # When the depth is scraped 90 s later
    samples = scrape_at(enqueued_at + 90)
    # Then the queue's oldest message has waited about 90 s; an empty queue reads 0
    age = value(samples, "speedtier_queue_oldest_age_seconds", tier="fast", family="t_plain")
    assert 89 <= age <= 92
    empty = value(samples, "speedtier_queue_oldest_age_seconds", tier="fast", family="t_serial")
    assert empty == 0
    # And the Redis serving each tier reports its memory use and limit
    info = broker.client.info("memory")
    used = value(samples, "speedtier_redis_memory_used_bytes", tier="fast")
    assert used > 0
    assert value(samples, "speedtier_redis_memory_max_bytes", tier="slow") == info["maxmemory"]
