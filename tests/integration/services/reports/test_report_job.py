"""The per-organization report job on a real worker: its steps in order, each send once,
and the delivery faults of seed 001 (Slack 500, Slack timeout after the message landed,
two deliveries racing one report)."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from router.requests import JobRequest
from services.app.bootstrap import Platform
from services.rails.delivery_claims import mark_delivered, release, unresolved
from services.reports.cli import reports
from services.reports.families import KIND, report_request
from shared.db.engine import session_scope
from testkit.fakes.protocol_server import ProtocolServer
from testkit.fakes.rails_server import RailsServer
from testkit.fakes.slack_server import POST_MESSAGE, SlackServer
from tests.integration.services.reports.factories import evaluated_agent, new_org, running_workers
from tests.platform_harness import wait_until
from tiers.job_state import JobState
from tiers.policies import RetryPolicy

DAY = date(2026, 11, 30)
COLLECT = "/internal/daily_agent_evaluation_reports/collect"
PREVIEW = "/internal/daily_agent_evaluation_reports/backfill_preview"
EMAIL = "/internal/daily_agent_evaluation_reports/email"


def _record_order(*servers: ProtocolServer) -> list[str]:
    """Every call the servers answer, in the order they arrive."""
    order: list[str] = []
    lock = threading.Lock()
    for server in servers:
        original = server._failure_for

        def tracked(request: Any, original: Any = original) -> Any:
            with lock:
                order.append(request.path)
            return original(request)

        server._failure_for = tracked  # type: ignore[method-assign]
    return order


def _org(platform: Platform, **kw: Any) -> int:
    with session_scope(platform.sessions) as session:
        org = new_org(session, **kw)
        evaluated_agent(session, org, "Ada", [90.0, 80.0], datetime(2026, 11, 30, 12, tzinfo=UTC))
        session.commit()
        return org.id


def _finished(platform: Platform, job_id: str) -> str:
    wait_until(
        lambda: (
            (platform.broker.jobs.record(job_id) or {}).get("state")
            in ("completed", "failed", "skipped", "record_missing")
        ),
        timeout=30,
    )
    return str(platform.broker.jobs.record(job_id)["state"])


def _enqueue(platform: Platform, org: int, **kw: Any) -> str:
    return platform.router.enqueue(report_request(org, DAY, **kw)).job_id


def _rows(org: int) -> dict[str, Any]:
    row = {"agent_id": 1, "agent_name": "Ada", "agent_email": None, "evaluations": 2}
    return {"rows": [{**row, "average_score": 85.0, "lowest_score": 80.0}], "organization_id": org}


def test_steps_run_in_order_collect_preview_slack_email(
    platform: Platform, rails: RailsServer, slack: SlackServer
) -> None:
    org = _org(platform)
    rails.results[COLLECT] = _rows(org)
    order = _record_order(rails, slack)
    job_id = _enqueue(platform, org, send_email=True, source="admin")
    assert job_id == f"daily-agent-eval-report-{org}-2026-11-30-email-bf"
    with running_workers(platform):
        assert _finished(platform, job_id) == "completed"
    assert order == [COLLECT, PREVIEW, POST_MESSAGE, EMAIL]
    assert len(slack.messages) == 1 and "Ada" in str(slack.messages[0]["blocks"])
    assert rails.calls(EMAIL)[0].body["delivery_key"].startswith(f"email/{job_id}/")


def test_native_collect_reads_the_mirrored_tables_and_never_calls_rails(
    make_platform: Any, rails: RailsServer, slack: SlackServer
) -> None:
    from tests.integration.services.reports.conftest import SHORT_RETRY, reports_settings

    platform = make_platform(
        retries={"daily_agent_eval_report": SHORT_RETRY},
        flag_overrides={"api2_daily_agent_evaluation_report_collect": True},
        **reports_settings(rails, slack),
    )
    org = _org(platform)
    job_id = _enqueue(platform, org, queue_backfill=False)
    with running_workers(platform):
        assert _finished(platform, job_id) == "completed"
    assert rails.calls(COLLECT) == [] and rails.calls(PREVIEW) == []
    assert "Ada" in str(slack.messages[0]["blocks"]) and "85.0%" in str(slack.messages[0])


def test_slack_500_releases_the_claim_and_the_retry_sends_once(
    platform: Platform, rails: RailsServer, slack: SlackServer
) -> None:
    org = _org(platform)
    slack.fail(POST_MESSAGE, "500")
    job_id = _enqueue(platform, org)
    with running_workers(platform):
        assert _finished(platform, job_id) == "completed"
    assert len(slack.requests_to(POST_MESSAGE)) == 2  # refused, then sent
    assert len(slack.messages) == 1
    assert len(rails.calls(COLLECT)) == 1  # the retry resumed at the Slack step
    assert unresolved(platform.sessions) == []


def test_slack_timeout_after_the_message_landed_stays_unresolved_and_is_not_resent(
    impatient_platform: Platform, rails: RailsServer, slack: SlackServer
) -> None:
    platform = impatient_platform
    org = _org(platform)
    slack.fail(POST_MESSAGE, "slow", delay=2.0)
    job_id = _enqueue(platform, org, send_email=True, source="admin")
    with running_workers(platform):
        assert _finished(platform, job_id) == "failed"
        slack.sleep(2.0)
    assert len(slack.messages) == 1  # it landed
    assert len(slack.requests_to(POST_MESSAGE)) == 1  # and was never sent again
    keys = [claim.delivery_key for claim in unresolved(platform.sessions)]
    assert len(keys) == 1 and keys[0].startswith(f"slack/{job_id}/")
    assert rails.calls(EMAIL) == []  # nothing after an uncertain Slack post
    assert "delivery outcome uncertain" in platform.broker.jobs.record(job_id)["last_error"]


def test_two_deliveries_racing_one_report_send_once(
    platform: Platform, rails: RailsServer, slack: SlackServer
) -> None:
    """A duplicate delivery of the same job (a redelivered message beside the live one)
    meets the fresh claim and waits; only one post lands."""
    org = _org(platform)
    slack.fail(POST_MESSAGE, "slow", delay=0.6)  # the first post is in flight a while
    job_id = _enqueue(platform, org)
    with running_workers(platform, threads=4):
        wait_until(lambda: len(slack.requests_to(POST_MESSAGE)) >= 1, timeout=20)
        # a second enqueue of the running report is deduplicated
        again = platform.router.enqueue(report_request(org, DAY))
        assert again.outcome == "deduplicated"
        _finished(platform, job_id)
    assert len(slack.messages) == 1


def test_a_paused_report_is_skipped_not_failed(
    platform: Platform, rails: RailsServer, slack: SlackServer
) -> None:
    org = _org(platform)
    platform.flags.set("pause_api2_daily_agent_evaluation_reports", True)
    try:
        job_id = _enqueue(platform, org)
        with running_workers(platform):
            assert _finished(platform, job_id) == "skipped"
    finally:
        platform.flags.set("pause_api2_daily_agent_evaluation_reports", False)
    assert rails.requests == [] and slack.requests == []


def test_a_missing_organization_is_record_missing(platform: Platform) -> None:
    job_id = platform.router.enqueue(
        JobRequest(KIND, 987654321, {"date": "2026-11-30", "source": "admin"})
    ).job_id
    with running_workers(platform):
        assert _finished(platform, job_id) == "record_missing"


@pytest.fixture(autouse=True)
def _clean_claims(platform: Platform) -> Any:
    yield
    with session_scope(platform.sessions) as session:
        session.execute(text("DELETE FROM outbound_delivery_claims"))
        session.commit()


def test_an_email_timeout_is_retried_with_the_same_key_and_rails_sends_it_once(
    make_platform: Any, rails: RailsServer, slack: SlackServer
) -> None:
    from tests.integration.services.reports.conftest import IMPATIENT, reports_settings

    # the retry (2 s backoff) comes after the slow answer was recorded by the fake
    platform = make_platform(
        retries={"daily_agent_eval_report": RetryPolicy(max_attempts=3, base_seconds=2.0)},
        **reports_settings(rails, slack, timeout=IMPATIENT),
    )
    org = _org(platform)
    rails.fail(EMAIL, "slow", delay=1.5)  # Rails sends it, the answer comes too late
    job_id = _enqueue(platform, org, send_email=True, queue_backfill=False, source="admin")
    with running_workers(platform):
        assert _finished(platform, job_id) == "completed"
    keys = [call.body["delivery_key"] for call in rails.calls(EMAIL)]
    assert len(keys) == 2 and keys[0] == keys[1]  # the retry carried the same key
    assert rails.sent_delivery_keys == keys[:1]  # and Rails sent one email
    assert len(slack.messages) == 1


def test_a_retry_replays_the_collect_engine_its_first_attempt_chose(
    platform: Platform, rails: RailsServer, slack: SlackServer
) -> None:
    """The rollout flag is off now, but the job's first attempt pinned the native engine:
    the retry collects natively and never calls Rails' collect."""
    org = _org(platform)
    job_id = _enqueue(platform, org, queue_backfill=False)
    JobState(platform.broker.jobs, job_id).set(collect_engine="native")
    with running_workers(platform):
        assert _finished(platform, job_id) == "completed"
    assert rails.calls(COLLECT) == []
    steps = JobState(platform.broker.jobs, job_id).completed_steps()
    assert steps["collect"]["engine"] == "native" and steps["collect"]["rows"]


@pytest.mark.parametrize("landed", [True, False])
def test_an_uncertain_post_resolved_by_hand_then_retried_as_the_same_job(
    impatient_platform: Platform, rails: RailsServer, slack: SlackServer, landed: bool
) -> None:
    """The seed's manual procedure: the operator checks the channel, marks the claim
    delivered (it landed: the retry skips the post) or releases it (it did not: the retry
    posts again), then retries the job; the email goes out once either way."""
    platform = impatient_platform
    org = _org(platform)
    slack.fail(POST_MESSAGE, "slow", delay=2.0)
    job_id = _enqueue(platform, org, send_email=True, queue_backfill=False, source="admin")
    with running_workers(platform):
        assert _finished(platform, job_id) == "failed"
        slack.sleep(2.0)
        [uncertain] = unresolved(platform.sessions)
        if landed:
            assert mark_delivered(platform.sessions, uncertain.delivery_key)
        else:
            assert release(platform.sessions, uncertain.delivery_key)
        result = CliRunner().invoke(reports, ["retry", job_id], obj=lambda: platform)
        assert result.exit_code == 0, result.output
        assert _finished(platform, job_id) == "completed"
    assert len(slack.messages) == (1 if landed else 2)
    assert len(rails.sent_delivery_keys) == 1
    steps = JobState(platform.broker.jobs, job_id).completed_steps()
    assert steps["slack"]["delivery_key"] == uncertain.delivery_key  # the same job, same key
    assert steps["slack"]["outcome"] == ("already_sent" if landed else "sent")
    assert unresolved(platform.sessions) == []


def test_retry_refuses_other_jobs_and_jobs_that_did_not_fail(platform: Platform) -> None:
    runner = CliRunner()
    result = runner.invoke(reports, ["retry", "kb-source-sync-1"], obj=lambda: platform)
    assert result.exit_code == 2 and "not a report job id" in result.output
    result = runner.invoke(
        reports, ["retry", "daily-agent-eval-report-1-2026-11-30-no-email-bf"], obj=lambda: platform
    )
    assert result.exit_code == 1 and "no job daily-agent-eval-report-1" in result.output
