"""``speedtier reports redrive`` and ``check`` against the test's platform."""

from __future__ import annotations

from datetime import UTC, date, datetime

from click.testing import CliRunner
from sqlalchemy import delete

from router.requests import JobRequest
from services.app.bootstrap import Platform
from services.rails import delivery_claims
from services.reports.cli import reports
from services.reports.dates import resolve
from services.reports.families import report_request
from shared.db.engine import session_scope
from shared.db.models.rails_uploads import GoodJob
from testkit.fakes.rails_server import RailsServer
from testkit.fakes.slack_server import SlackServer
from tests.integration.services.reports.factories import new_org, running_workers
from tests.platform_harness import wait_until
from tiers.job_state import JobState


def _run(platform: Platform, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(reports, list(args), obj=lambda: platform)
    return result.exit_code, result.output


def test_redrive_a_sentinel_enqueues_the_aggregate_job(platform: Platform) -> None:
    code, output = _run(platform, "redrive", "yesterday")
    assert code == 0 and "daily-agent-eval-report-yesterday-tick-redrive-yesterday-" in output
    code, output = _run(platform, "redrive", "2026-11-29")
    assert code == 0 and "tick-redrive-2026-11-29-" in output and "added" in output


def test_redrive_one_organization_enqueues_its_report(platform: Platform) -> None:
    with session_scope(platform.sessions) as session:
        org = new_org(session, time_zone="Pacific/Kiritimati")
        session.commit()
    code, output = _run(platform, "redrive", "2026-11-29", "--org", str(org.id))
    assert code == 0 and f"daily-agent-eval-report-{org.id}-2026-11-29-no-email-bf" in output


def test_redrive_refuses_bad_days_and_paused_reports(platform: Platform) -> None:
    code, output = _run(platform, "redrive", "tomorrow")
    assert code == 2 and "expected yesterday, today or YYYY-MM-DD" in output
    platform.flags.set("pause_api2_daily_agent_evaluation_reports", True)
    try:
        code, output = _run(platform, "redrive", "today")
        assert code == 1 and "resume it first" in output
    finally:
        platform.flags.set("pause_api2_daily_agent_evaluation_reports", False)


def test_check_prints_pass_or_fail_for_each(platform: Platform) -> None:
    _code, output = _run(platform, "check")
    assert "[pass] pause_api2_daily_agent_evaluation_reports is off" in output
    assert "[pass] report ticks at 04:00 and 20:00 UTC" in output
    assert "report deliveries with an uncertain outcome" in output


def test_check_fails_on_a_new_goodjob_row_of_a_replaced_class(platform: Platform) -> None:
    with session_scope(platform.sessions) as session:
        session.add(GoodJob(job_class="SendDailyAgentEvaluationReportForOrganizationJob"))
        session.commit()
    try:
        code, output = _run(platform, "check")
        assert code == 1
        assert "[fail] new normal-path GoodJob rows since" in output
        assert "SendDailyAgentEvaluationReportForOrganizationJob: 1" in output
        code, output = _run(platform, "check", "--since", "2999-01-01")
        assert "[pass] new normal-path GoodJob rows since 2999-01-01" in output
    finally:
        with session_scope(platform.sessions) as session:
            session.execute(delete(GoodJob))
            session.commit()


def test_a_tick_skipped_while_paused_is_re_driven_with_its_sentinel(
    platform: Platform, slack: SlackServer
) -> None:
    """The seed's re-drive: the 04:00 tick met the kill switch and completed as skipped;
    once resumed, ``redrive yesterday`` runs the aggregate job, each org's day resolved in
    its own zone at that moment, and every report goes out."""
    with session_scope(platform.sessions) as session:
        orgs = [new_org(session, time_zone=zone) for zone in ("UTC", "Asia/Tokyo")]
        session.commit()
    tick = platform.tick("daily-agent-eval-report-yesterday")
    platform.flags.set("pause_api2_daily_agent_evaluation_reports", True)
    skipped = tick.job_id("2026-12-01T04:00Z")
    platform.router.enqueue(JobRequest(tick.kind, None, {"slot": "2026-12-01T04:00Z"}))
    with running_workers(platform):
        wait_until(lambda: platform.broker.jobs.record(skipped)["state"] == "skipped", 30)
        platform.flags.set("pause_api2_daily_agent_evaluation_reports", False)
        code, output = _run(platform, "redrive", "yesterday")
        assert code == 0
        redrive_id = output.split(":", 1)[0]
        wait_until(lambda: platform.broker.jobs.record(redrive_id)["state"] == "completed", 30)
        state = JobState(platform.broker.jobs, redrive_id)
        instant = datetime.fromisoformat(state.get("instant"))
        assert abs((datetime.now(UTC) - instant).total_seconds()) < 600  # resolved when it ran
        expected = [
            f"daily-agent-eval-report-{org.id}-{resolve('yesterday', org.time_zone, instant)}"
            "-no-email-bf"
            for org in orgs
        ]
        for job_id in expected:
            wait_until(
                lambda j=job_id: (platform.broker.jobs.record(j) or {}).get("state") == "completed",
                30,
            )
    posted = " ".join(str(m["blocks"][0]) for m in slack.messages)
    assert all(f"(#{org.id})" in posted for org in orgs)


def test_check_lists_failed_report_jobs(platform: Platform, rails: RailsServer) -> None:
    with session_scope(platform.sessions) as session:
        org = new_org(session)
        session.commit()
    rails.reject("/internal/daily_agent_evaluation_reports/backfill_preview", 422)
    job_id = platform.router.enqueue(
        report_request(org.id, date(2026, 11, 30), source="admin")
    ).job_id
    with running_workers(platform):
        wait_until(lambda: platform.broker.jobs.record(job_id)["state"] == "failed", 30)
    code, output = _run(platform, "check")
    assert code == 1
    assert "[fail] failed report jobs: 1" in output and job_id in output
    assert "422" in output


def test_check_fails_while_paused_and_on_an_uncertain_report_delivery(platform: Platform) -> None:
    key = f"slack/daily-agent-eval-report-check-{datetime.now(UTC):%H%M%S%f}"
    platform.flags.set("pause_api2_daily_agent_evaluation_reports", True)
    assert delivery_claims.claim(platform.sessions, key)
    try:
        code, output = _run(platform, "check")
    finally:
        platform.flags.set("pause_api2_daily_agent_evaluation_reports", False)
        delivery_claims.mark_delivered(platform.sessions, key)
    assert code == 1
    assert "[fail] pause_api2_daily_agent_evaluation_reports is on (expected off)" in output
    assert "[fail] report deliveries with an uncertain outcome:" in output and key in output
    _code, after = _run(platform, "check")
    assert "[pass] pause_api2_daily_agent_evaluation_reports is off" in after
    assert key not in after
