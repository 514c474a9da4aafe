"""Provider rate limits delay jobs without spending attempts; real failures spend the
five attempts and the failed job is kept."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import redis

from services.app.bootstrap import Platform
from services.connectors.nodes import Connection, NodeRef, RateLimitState
from services.super_sources.families import RETENTION_SECONDS, import_request, index_request
from tests import platform_harness as h
from tests.fixtures_platform import MakePlatform
from tests.integration.services.super_sources import tracker
from tests.integration.services.super_sources.conftest import TRACKER, make_connection, workers
from tiers.policies import RetryPolicy

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _node(client: redis.Redis, namespace: str, root: str, n: int) -> NodeRef:
    tracker.put_nodes(client, namespace, root, {f"{root}/{n}": (f"text {n}", T0)})
    return NodeRef(tracker.NODE_TYPE, f"{root}/{n}")


def _fetches(client: redis.Redis, namespace: str, ref: NodeRef) -> int:
    return int(client.hget(f"{namespace}:tracker:fetches", ref.node_id) or 0)


def test_a_spent_quota_delays_the_job_to_its_reset_before_any_call(
    super_platform: Platform,
    redis_client: redis.Redis,
    namespace: str,
    organization: Callable[[], int],
) -> None:
    org = organization()
    conn_id = make_connection(super_platform, org, "gitlab")
    root = NodeRef(tracker.ROOT_TYPE, f"q{org}")
    ref = _node(redis_client, namespace, root.node_id, 1)
    # Given the provider said the connection's quota is spent until 1.5 s from now
    conn = Connection("gitlab", conn_id, org, "", {}, {})
    reset = datetime.now(UTC) + timedelta(seconds=1.5)
    RateLimitState(redis_client, namespace).record(conn, 0, reset)
    # When its index job runs
    answer = super_platform.router.enqueue(index_request(org, "gitlab", conn_id, root, ref))
    with workers(super_platform):
        h.wait_until(lambda: h.state(super_platform.broker, answer.job_id) == "delayed")
        record = super_platform.broker.jobs.record(answer.job_id) or {}
        # Then it waits for the reset without calling the provider or spending an attempt
        assert record["last_delay"].startswith("rate-limit")
        assert record["last_delay"].count("rate-limit") == 1  # the reason said once
        assert _fetches(redis_client, namespace, ref) == 0
        h.wait_until(lambda: h.state(super_platform.broker, answer.job_id) == "completed")
    record = super_platform.broker.jobs.record(answer.job_id) or {}
    assert record["failures"] == "0"
    assert _fetches(redis_client, namespace, ref) == 1


def test_a_429_during_the_call_delays_by_its_retry_after_and_spends_no_attempt(
    super_platform: Platform,
    redis_client: redis.Redis,
    namespace: str,
    organization: Callable[[], int],
) -> None:
    org = organization()
    conn_id = make_connection(super_platform, org, "acme")
    root = NodeRef(tracker.ROOT_TYPE, f"r{org}")
    ref = _node(redis_client, namespace, root.node_id, 1)
    # Given the provider answers the next call 429 with Retry-After: 1
    redis_client.set(f"{namespace}:tracker:retry_after", 1)
    answer = super_platform.router.enqueue(index_request(org, "acme", conn_id, root, ref))
    with workers(super_platform):
        h.wait_until(lambda: h.state(super_platform.broker, answer.job_id) == "completed")
    record = super_platform.broker.jobs.record(answer.job_id) or {}
    # Then the job was delayed once, called again, and never spent an attempt
    assert "retry-after" in record["last_delay"]
    assert record["failures"] == "0" and record.get("last_error", "") == ""
    assert _fetches(redis_client, namespace, ref) == 2


def test_a_quota_spent_during_one_job_holds_back_the_next_jobs_of_the_connection(
    super_platform: Platform,
    redis_client: redis.Redis,
    namespace: str,
    organization: Callable[[], int],
) -> None:
    org = organization()
    conn_id = make_connection(super_platform, org, "gitlab")
    root = NodeRef(tracker.ROOT_TYPE, f"s{org}")
    first, second = (_node(redis_client, namespace, root.node_id, n) for n in (1, 2))
    # Given the first call reports the quota spent for 1.5 s
    redis_client.set(f"{namespace}:tracker:exhaust", 1.5)
    with workers(super_platform, threads=1):
        one = super_platform.router.enqueue(index_request(org, "gitlab", conn_id, root, first))
        h.wait_until(lambda: h.state(super_platform.broker, one.job_id) == "completed")
        # When the connection's next job comes
        two = super_platform.router.enqueue(index_request(org, "gitlab", conn_id, root, second))
        h.wait_until(lambda: h.state(super_platform.broker, two.job_id) == "completed")
    # Then it waited for the reset before calling, with no attempt spent
    record = super_platform.broker.jobs.record(two.job_id) or {}
    assert "rate-limit" in record["last_delay"] and record["failures"] == "0"
    assert _fetches(redis_client, namespace, second) == 1


FAST_FIVE = RetryPolicy(max_attempts=5, base_seconds=0.05, max_backoff_seconds=0.2)


@pytest.fixture
def quick_retries(
    make_platform: MakePlatform, redis_client: redis.Redis, namespace: str
) -> Platform:
    """The families' five attempts, with the backoff shortened to fit a test."""
    tracker.configure(redis_client, namespace)
    return make_platform(services=[TRACKER], retries={"super_index": FAST_FIVE})


def test_a_failing_node_spends_five_attempts_and_its_failed_job_is_kept(
    quick_retries: Platform,
    redis_client: redis.Redis,
    namespace: str,
    organization: Callable[[], int],
) -> None:
    org = organization()
    conn_id = make_connection(quick_retries, org, "acme")
    root = NodeRef(tracker.ROOT_TYPE, f"f{org}")
    ref = _node(redis_client, namespace, root.node_id, 1)
    # Given a node whose provider answers 503 every time
    redis_client.set(f"{namespace}:tracker:fail:{ref.node_id}", 100)
    answer = quick_retries.router.enqueue(index_request(org, "acme", conn_id, root, ref))
    with workers(quick_retries):
        h.wait_until(lambda: h.state(quick_retries.broker, answer.job_id) == "failed", 30)
    # Then it was tried five times, and its failed record stays for the retention (a week)
    record = quick_retries.broker.jobs.record(answer.job_id) or {}
    assert record["failures"] == "5" and "503" in record["last_error"]
    assert _fetches(redis_client, namespace, ref) == 5
    ttl = redis_client.ttl(quick_retries.broker.jobs.record_key(answer.job_id))
    assert RETENTION_SECONDS - 3600 < ttl <= RETENTION_SECONDS
    assert quick_retries.broker.queue_failures(["super_index.slow"]) == {"super_index.slow": 1}


def test_the_quota_check_paces_instead_of_counting_as_the_providers_refusal(
    redis_client: redis.Redis, namespace: str
) -> None:
    from services.indexing.chunking import Chunker
    from services.indexing.embedders import HashingEmbedder
    from services.super_sources.context import QUOTA_JITTER_SECONDS, SuperContext
    from shared.errors import Delay

    rate_limits = RateLimitState(redis_client, namespace)
    ctx = SuperContext(
        registry=tracker.tracker_registry(),
        rate_limits=rate_limits,
        chunker=Chunker(),
        embedder=HashingEmbedder(),
        client=redis_client,
        namespace=namespace,
        provider_urls={},
    )
    conn = Connection("gitlab", 5, 6, "", {}, {})
    ctx.wait_for_quota(conn)  # not blocked: returns
    reset = datetime.now(UTC) + timedelta(seconds=30)
    rate_limits.record(conn, 0, reset)
    with pytest.raises(Delay) as raised:
        ctx.wait_for_quota(conn)
    # a delay to the reset (plus up to a second, so waiters do not all start at once) that
    # the platform does not count toward the delays that end an attempt
    assert raised.value.source == "pacing"
    assert reset.timestamp() <= raised.value.until <= reset.timestamp() + QUOTA_JITTER_SECONDS


def test_an_import_rate_limited_at_every_page_finishes_without_spending_attempts(
    super_platform: Platform,
    redis_client: redis.Redis,
    namespace: str,
    organization: Callable[[], int],
) -> None:
    # Given a walk of 26 pages, each answering 429 once before it answers: more provider
    # delays than a job may take in a row (RetryPolicy.max_consecutive_delays, 20)
    org = organization()
    settings = {"page_size": 1, "walk_retry_after": 0.02}
    conn = make_connection(super_platform, org, "gitlab", settings=settings)
    root = NodeRef(tracker.ROOT_TYPE, f"w{org}")
    for n in range(26):
        _node(redis_client, namespace, root.node_id, n)
    policy = super_platform.registry.by_name()["super_import"].retry
    assert policy.max_consecutive_delays < 26
    answer = super_platform.router.enqueue(import_request(org, "gitlab", conn, root))
    with workers(super_platform):
        h.wait_until(lambda: h.state(super_platform.broker, answer.job_id) == "completed", 60)
    # Then each delay carried the walk's progress, so none counted against the attempt
    record = super_platform.broker.jobs.record(answer.job_id) or {}
    assert record["failures"] == "0" and "retry-after" in record["last_delay"]
    refused = redis_client.scard(f"{namespace}:tracker:refused:{root.node_id}")
    assert refused == 26


def test_an_import_waits_at_the_webhook_reserve_while_a_webhook_still_proceeds(
    super_platform: Platform,
    redis_client: redis.Redis,
    namespace: str,
    organization: Callable[[], int],
) -> None:
    from services.app.api import create_app

    client = create_app(super_platform).test_client()
    org = organization()
    secret = "s3cret"
    conn_id = make_connection(super_platform, org, "gitlab", webhook_secret=secret)
    root = NodeRef(tracker.ROOT_TYPE, f"v{org}")
    walked = _node(redis_client, namespace, root.node_id, 1)
    hooked = _node(redis_client, namespace, root.node_id, 2)
    # Given the provider said 3 calls are left until 15 s from now: under the source's
    # webhook reserve (tracker.WEBHOOK_RESERVE, 5) but not spent
    conn = Connection("gitlab", conn_id, org, "", {}, {})
    reset = datetime.now(UTC) + timedelta(seconds=15)
    super_platform_rate_limits(super_platform).record(conn, 3, reset)
    assert tracker.WEBHOOK_RESERVE > 3
    # When an import and a webhook delivery for that connection arrive
    answer = super_platform.router.enqueue(import_request(org, "gitlab", conn_id, root))
    body = json.dumps({"delivery": f"r-{org}", "root": root.node_id, "nodes": [hooked.node_id]})
    stamp = int(time.time())
    posted = client.post(
        f"/webhooks/gitlab/events?connection={conn_id}",
        data=body.encode(),
        headers={
            "Content-Type": "application/json",
            "X-Tracker-Timestamp": str(stamp),
            "X-Tracker-Signature": tracker.sign(secret, body.encode(), stamp),
        },
    )
    assert posted.status_code == 202
    assert posted.get_json()["queue"] == "super_webhook.fast"
    hook_job = str(posted.get_json()["job_id"])
    with workers(super_platform):
        # Then the import waits for the reset, and the webhook's node is fetched and indexed
        h.wait_until(lambda: h.state(super_platform.broker, answer.job_id) == "delayed")
        h.wait_until(lambda: h.state(super_platform.broker, hook_job) == "completed")
        # (the webhook job enqueues the node's index job, which fetches it: awaited too)
        h.wait_until(lambda: _fetches(redis_client, namespace, hooked) == 1)
        # before the reset, while the import still waits without walking
        assert datetime.now(UTC) < reset, "the machine was too slow to observe the order"
        assert h.state(super_platform.broker, answer.job_id) == "delayed"
        assert redis_client.llen(f"{namespace}:tracker:walked:{root.node_id}") == 0
        record = super_platform.broker.jobs.record(answer.job_id) or {}
        assert "rate-limit" in record["last_delay"]
        # and after the reset the import walks and its node is indexed
        h.wait_until(lambda: _fetches(redis_client, namespace, walked) == 1, 60)
        h.wait_until(lambda: h.state(super_platform.broker, answer.job_id) == "completed", 60)
    record = super_platform.broker.jobs.record(answer.job_id) or {}
    assert record["failures"] == "0"


def super_platform_rate_limits(platform: Platform) -> RateLimitState:
    """A RateLimitState over the platform's Redis with the tracker registry's reserves."""
    return RateLimitState(
        platform.broker.client,
        platform.settings.redis_namespace,
        reserves=tracker.tracker_registry().webhook_reserves(),
    )
