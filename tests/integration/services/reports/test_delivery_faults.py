"""Delivery under faults, on real worker processes: a worker killed after the Slack post and
before the email (the retry sends only the email), and several workers and enqueues racing
one report (one send). The claim lease that keeps a second live copy from posting is shown
in-process at the end."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime
from typing import Any

import pytest

from services.app.bootstrap import Platform
from services.rails.delivery_claims import claim, find, mark_delivered
from services.reports.families import report_request
from shared.db.engine import session_scope
from testkit.fakes.rails_server import RailsServer
from testkit.fakes.slack_server import POST_MESSAGE, SlackServer
from testkit.reports_workers import start_worker, stop
from tests.fixtures_platform import TOKEN
from tests.integration.services.reports.conftest import reports_settings
from tests.integration.services.reports.factories import evaluated_agent, new_org, running_workers
from tests.platform_harness import wait_until
from tiers.job_state import JobState

DAY = date(2026, 11, 30)
COLLECT = "/internal/daily_agent_evaluation_reports/collect"
EMAIL = "/internal/daily_agent_evaluation_reports/email"


def _values(platform: Platform, rails: RailsServer, slack: SlackServer) -> dict[str, Any]:
    return {
        "redis_url": platform.settings.redis_url,
        "database_url": platform.settings.database_url,
        "redis_namespace": platform.settings.redis_namespace,
        "environment": "test",
        "internal_api_token": TOKEN,
        "flag_cache_seconds": 0,
        "metrics_port": 0,
        **{
            k: (v.get_secret_value() if hasattr(v, "get_secret_value") else v)
            for k, v in reports_settings(rails, slack).items()
        },
    }


def _org(platform: Platform) -> int:
    with session_scope(platform.sessions) as session:
        org = new_org(session)
        evaluated_agent(session, org, "Ada", [90.0], datetime(2026, 11, 30, 9, tzinfo=UTC))
        session.commit()
        return org.id


def _state(platform: Platform, job_id: str) -> str | None:
    record = platform.broker.jobs.record(job_id)
    return record["state"] if record else None


@pytest.mark.timeout(300)
def test_a_worker_killed_after_slack_and_before_email_retries_only_the_email(
    platform: Platform, rails: RailsServer, slack: SlackServer
) -> None:
    org = _org(platform)
    job_id = platform.router.enqueue(
        report_request(org, DAY, send_email=True, queue_backfill=False, source="admin")
    ).job_id
    values = _values(platform, rails, slack)
    state = JobState(platform.broker.jobs, job_id)
    # Each armed worker dies right after it marks its first step: the first after
    # "collect", the second after "slack" (collect is already done when it starts).
    first = start_worker(values, fault="step.after")
    try:
        first.join(timeout=90)
        assert first.exitcode == -9 and list(state.completed_steps()) == ["collect"]
        second = start_worker(values, fault="step.after")
        second.join(timeout=90)
        assert second.exitcode == -9
        assert list(state.completed_steps()) == ["collect", "slack"]
        assert len(slack.messages) == 1 and rails.calls(EMAIL) == []
        third = start_worker(values)
        try:
            wait_until(lambda: _state(platform, job_id) == "completed", timeout=90)
        finally:
            stop(third)
    finally:
        stop(first)
    assert list(state.completed_steps()) == ["collect", "slack", "email"]
    assert len(slack.messages) == 1  # the retries did not post again
    assert len(slack.requests_to(POST_MESSAGE)) == 1
    assert len(rails.calls(COLLECT)) == 1
    assert len(rails.calls(EMAIL)) == 1 and len(rails.sent_delivery_keys) == 1


@pytest.mark.timeout(300)
def test_workers_and_enqueues_racing_one_report_send_it_once(
    platform: Platform, rails: RailsServer, slack: SlackServer
) -> None:
    """Two worker processes consume the queue; while one of them is posting the report
    (Slack takes 3 s to answer), 40 more enqueues of it arrive from 4 threads: all are
    deduplicated against the running job, and one message lands."""
    org = _org(platform)
    slack.fail(POST_MESSAGE, "slow", delay=3.0)
    values = {**_values(platform, rails, slack), "http_timeout_seconds": 20.0}
    workers = [start_worker(values), start_worker(values)]
    answers: list[str] = []
    lock = threading.Lock()

    def enqueue_many() -> None:
        for _ in range(10):
            outcome = platform.router.enqueue(report_request(org, DAY)).outcome
            with lock:
                answers.append(outcome)

    try:
        first = platform.router.enqueue(report_request(org, DAY))
        assert first.outcome == "added"
        wait_until(lambda: len(slack.requests_to(POST_MESSAGE)) == 1, timeout=90)
        threads = [threading.Thread(target=enqueue_many) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert _state(platform, first.job_id) == "active"  # still posting: a real race
        wait_until(lambda: _state(platform, first.job_id) == "completed", timeout=60)
    finally:
        stop(*workers)
    assert answers == ["deduplicated"] * 40
    assert len(slack.messages) == 1 and len(slack.requests_to(POST_MESSAGE)) == 1
    assert len(rails.calls(COLLECT)) == 1


def test_a_copy_meeting_another_copys_claim_never_posts(
    platform: Platform, rails: RailsServer, slack: SlackServer
) -> None:
    """Another copy holds the Slack claim: while it is fresh (mid-post) this copy is delayed
    without spending an attempt; once it is marked delivered this copy completes without
    posting (``already_sent``)."""
    in_flight, landed = _org(platform), _org(platform)
    keys = {}
    jobs = {}
    for org in (in_flight, landed):
        job_id = platform.router.enqueue(report_request(org, DAY, queue_backfill=False)).job_id
        keys[org] = f"slack/{job_id}/{platform.broker.jobs.record(job_id)['created_at']}"
        jobs[org] = job_id
        assert claim(platform.sessions, keys[org])  # the other copy's claim
    assert mark_delivered(platform.sessions, keys[landed])
    with running_workers(platform):
        wait_until(lambda: _state(platform, jobs[in_flight]) == "delayed", timeout=20)
        wait_until(lambda: _state(platform, jobs[landed]) == "completed", timeout=20)
    assert platform.broker.jobs.record(jobs[in_flight]).get("failures", "0") == "0"
    steps = JobState(platform.broker.jobs, jobs[landed]).completed_steps()
    assert steps["slack"]["outcome"] == "already_sent"
    assert slack.requests_to(POST_MESSAGE) == []
    assert find(platform.sessions, keys[in_flight]).delivered_at is None  # type: ignore[union-attr]
