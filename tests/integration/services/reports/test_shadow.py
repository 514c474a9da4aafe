"""Shadow runs of the native report row collector beside Rails' (the Scientist pattern): the
candidate runs read-only on the same input, its differences are recorded and never used,
``speedtier reports parity`` reports them and ``reports check`` fails while any diverged."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from click.testing import CliRunner

from services.app.bootstrap import Platform
from services.reports.cli import reports
from services.reports.families import report_request
from services.reports.shadow import SHADOW_FLAG, differences
from services.reports.store import ReportRow
from shared.db.engine import session_scope
from testkit.fakes.rails_server import RailsServer
from testkit.fakes.slack_server import SlackServer
from tests.integration.services.reports.factories import evaluated_agent, new_org, running_workers
from tests.platform_harness import wait_until
from tiers.job_state import JobState

DAY = date(2026, 11, 30)
COLLECT = "/internal/daily_agent_evaluation_reports/collect"


def _row(agent_id: int, **fields: Any) -> ReportRow:
    values: dict[str, Any] = {
        "agent_name": "Ada",
        "agent_email": "ada@x.test",
        "evaluations": 2,
        "average_score": 85.0,
        "lowest_score": 80.0,
        **fields,
    }
    return ReportRow(agent_id=agent_id, **values)


def test_differences_name_identities_fields_and_counts() -> None:
    assert differences([_row(1)], [_row(1)]) == []
    assert differences([_row(1), _row(2)], [_row(1, evaluations=3), _row(3)]) == [
        "agent 2: missing from native",
        "agent 3: only in native",
        "agent 1 evaluations: rails 2, native 3",
    ]
    assert differences([_row(1)], []) == ["rows: rails 1, native 0", "agent 1: missing from native"]


def _org_with_agent(platform: Platform) -> tuple[int, int]:
    with session_scope(platform.sessions) as session:
        org = new_org(session)
        agent = evaluated_agent(
            session, org, "Ada", [90.0, 80.0], datetime(2026, 11, 30, 12, tzinfo=UTC)
        )
        session.commit()
        return org.id, agent.id


def _run_report(platform: Platform, org: int) -> str:
    job_id = platform.router.enqueue(report_request(org, DAY, source="admin")).job_id
    with running_workers(platform):
        wait_until(lambda: (platform.broker.jobs.record(job_id) or {}).get("state") == "completed")
    return job_id


def _rails_rows(org: int, agent: int, **fields: Any) -> dict[str, Any]:
    row = {"agent_id": agent, "agent_name": "Ada", "agent_email": "ada@x.test"}
    row.update({"evaluations": 2, "average_score": 85.0, "lowest_score": 80.0, **fields})
    return {"rows": [row], "organization_id": org}


def _parity(platform: Platform, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(reports, ["parity", *args], obj=lambda: platform)
    return result.exit_code, result.output


def test_a_matching_shadow_run_is_recorded_and_parity_passes(
    platform: Platform, rails: RailsServer, slack: SlackServer
) -> None:
    # Given an organization still collecting through Rails, with shadow runs on
    org, agent = _org_with_agent(platform)
    platform.flags.overrides[SHADOW_FLAG] = True
    rails.results[COLLECT] = _rails_rows(org, agent)
    # When its report runs
    job_id = _run_report(platform, org)
    # Then the native collector ran beside Rails and agreed
    shadow = JobState(platform.broker.jobs, job_id).get("shadow")
    assert shadow["matched"] is True and shadow["candidate_rows"] == 1, shadow
    code, output = _parity(platform, "--org", str(org))
    assert code == 0, output
    assert f"{job_id} " in output and "match: rails 1 rows, native 1 rows" in output


def test_a_divergence_is_recorded_never_used_and_fails_parity_and_check(
    platform: Platform, rails: RailsServer, slack: SlackServer
) -> None:
    # Given Rails answering a count the native collector does not find
    org, agent = _org_with_agent(platform)
    platform.flags.overrides[SHADOW_FLAG] = True
    rails.results[COLLECT] = _rails_rows(org, agent, evaluations=3)
    # When the report runs
    job_id = _run_report(platform, org)
    # Then the report used Rails' rows (the candidate never acts) and the difference is kept
    collected = JobState(platform.broker.jobs, job_id).completed_steps()["collect"]
    assert collected["engine"] == "rails" and collected["rows"][0]["evaluations"] == 3
    shadow = JobState(platform.broker.jobs, job_id).get("shadow")
    assert shadow["differences"] == [f"agent {agent} evaluations: rails 3, native 2"]
    code, output = _parity(platform, "--org", str(org))
    assert code == 1
    assert "DIVERGED" in output and f"agent {agent} evaluations: rails 3, native 2" in output
    check = CliRunner().invoke(reports, ["check"], obj=lambda: platform)
    assert "[fail] native collector shadow runs in 24 h:" in check.output, check.output
    assert check.exit_code == 1


def test_without_the_shadow_flag_nothing_runs_and_parity_has_nothing_to_show(
    platform: Platform, rails: RailsServer, slack: SlackServer
) -> None:
    org, agent = _org_with_agent(platform)
    rails.results[COLLECT] = _rails_rows(org, agent)
    job_id = _run_report(platform, org)
    assert JobState(platform.broker.jobs, job_id).get("shadow") is None
    code, output = _parity(platform, "--org", str(org))
    assert code == 1 and "shadow runs since" in output and ": 0, diverged: 0" in output
