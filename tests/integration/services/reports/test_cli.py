"""``speedtier reports redrive`` and ``check`` against the test's platform."""

from __future__ import annotations

from click.testing import CliRunner

from services.app.bootstrap import Platform
from services.reports.cli import reports
from shared.db.engine import session_scope
from tests.integration.services.reports.factories import new_org


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
