"""The 04:00 and 20:00 UTC ticks on a real worker: dates resolved in each organization's
zone and persisted before any external call, fan-out to reportable organizations only, the
combined email with one CSV per organization that produced rows, the kill switch."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from router.requests import JobRequest
from services.app.bootstrap import Platform
from services.reports.families import FAMILY
from services.reports.ticks import TODAY_TICK, YESTERDAY_TICK
from shared.db.engine import session_scope
from testkit.fakes.rails_server import RailsServer
from testkit.fakes.slack_server import SlackServer
from tests.fixtures_platform import MakePlatform
from tests.integration.services.reports.conftest import SHORT_RETRY, reports_settings
from tests.integration.services.reports.factories import evaluated_agent, new_org, running_workers
from tests.platform_harness import wait_until
from tiers.job_state import JobState

EMAIL = "/internal/daily_agent_evaluation_reports/email"
COLLECT_FLAG = "api2_daily_agent_evaluation_report_collect"


@pytest.fixture
def platform(make_platform: MakePlatform, rails: RailsServer, slack: SlackServer) -> Platform:
    """Native collection (no Rails collect calls to script), Rails for the email."""
    return make_platform(
        retries={FAMILY: SHORT_RETRY},
        flag_overrides={COLLECT_FLAG: True},
        **reports_settings(rails, slack),
    )


def _orgs(platform: Platform) -> dict[str, int]:
    with session_scope(platform.sessions) as session:
        made = {
            "utc": new_org(session, time_zone="UTC"),
            "kiritimati": new_org(
                session, time_zone="Pacific/Kiritimati", rules=("fixed_per_period",)
            ),
            "pago": new_org(session, time_zone="Pacific/Pago_Pago"),
            "demo": new_org(session, demo=True),
            "percentage": new_org(session, rules=("percentage",)),
        }
        # rows: UTC org on 2026-11-30, Kiritimati's 2026-11-30 (UTC+14), none for Pago Pago
        evaluated_agent(session, made["utc"], "Ada", [90.0], datetime(2026, 11, 30, 9, tzinfo=UTC))
        evaluated_agent(
            session, made["kiritimati"], "Kai", [70.0], datetime(2026, 11, 30, 2, tzinfo=UTC)
        )
        session.commit()
        return {name: org.id for name, org in made.items()}


def _run_tick(platform: Platform, name: str, slot: str, **state: Any) -> str:
    tick = platform.tick(name)
    job_id = tick.job_id(slot)
    answer = platform.router.enqueue(JobRequest(tick.kind, None, {"slot": slot}))
    assert answer.outcome == "added"
    if state:  # what an earlier attempt of this tick persisted before it died
        JobState(platform.broker.jobs, job_id).set(**state)
    with running_workers(platform, only=(tick.family_name,)):
        wait_until(lambda: platform.broker.jobs.record(job_id)["state"] == "completed", 30)
    return job_id


def _report_ids(platform: Platform) -> set[str]:
    client, ns = platform.broker.client, platform.settings.redis_namespace
    return {
        key.decode().split(":job:", 1)[1]
        for key in client.scan_iter(match=f"{ns}:job:daily-agent-eval-report-*")
        if b"-tick-" not in key
    }


def test_the_0400_tick_reports_yesterday_in_each_zone(
    platform: Platform, rails: RailsServer
) -> None:
    orgs = _orgs(platform)
    job_id = _run_tick(platform, YESTERDAY_TICK, "2026-12-01T04:00Z")
    # 04:00Z is 18:00 on Dec 1 in Kiritimati (UTC+14) and 17:00 on Nov 30 in Pago Pago (UTC-11)
    expected = {
        orgs["utc"]: "2026-11-30",
        orgs["kiritimati"]: "2026-11-30",
        orgs["pago"]: "2026-11-29",
    }
    resolved = JobState(platform.broker.jobs, job_id).get("resolvedDates")
    assert {int(k): v for k, v in resolved.items()}.items() >= expected.items()
    assert str(orgs["demo"]) not in resolved and str(orgs["percentage"]) not in resolved
    ids = _report_ids(platform)
    for org, day in expected.items():
        assert f"daily-agent-eval-report-{org}-{day}-no-email-bf" in ids
    reported = {int(job_id.split("-")[4]) for job_id in ids}
    assert orgs["demo"] not in reported and orgs["percentage"] not in reported
    # one combined email, one CSV per organization that produced rows
    emails = rails.calls(EMAIL)
    assert len(emails) == 1 and emails[0].body["kind"] == "combined"
    attachments = {a["organization_id"]: a for a in emails[0].body["attachments"]}
    assert set(attachments) >= {orgs["utc"], orgs["kiritimati"]}
    assert orgs["pago"] not in attachments
    assert "Ada" in attachments[orgs["utc"]]["content"]
    assert attachments[orgs["utc"]]["content"].startswith("agent_id,agent_name")
    assert emails[0].body["delivery_key"].startswith(f"combined/{job_id}/")


def test_the_2000_tick_reports_today_in_each_zone(platform: Platform) -> None:
    orgs = _orgs(platform)
    _run_tick(platform, TODAY_TICK, "2026-12-01T20:00Z")
    ids = _report_ids(platform)
    # 20:00Z is 10:00 on Dec 2 in Kiritimati and 09:00 on Dec 1 in Pago Pago
    assert f"daily-agent-eval-report-{orgs['kiritimati']}-2026-12-02-no-email-bf" in ids
    assert f"daily-agent-eval-report-{orgs['pago']}-2026-12-01-no-email-bf" in ids
    assert f"daily-agent-eval-report-{orgs['utc']}-2026-12-01-no-email-bf" in ids


def test_a_retry_keeps_the_dates_its_first_attempt_persisted(platform: Platform) -> None:
    """A re-drive resolves at the moment it first runs; its retry after the tenant's local
    midnight must not move the day: the persisted resolvedDates win."""
    orgs = _orgs(platform)
    persisted = {str(orgs["utc"]): "2026-11-28", str(orgs["pago"]): "2026-11-27"}
    _run_tick(platform, TODAY_TICK, "redrive-today-1", resolvedDates=persisted)
    ids = _report_ids(platform)
    assert ids == {
        f"daily-agent-eval-report-{orgs['utc']}-2026-11-28-no-email-bf",
        f"daily-agent-eval-report-{orgs['pago']}-2026-11-27-no-email-bf",
    }


def test_a_paused_tick_is_skipped_and_enqueues_nothing(
    platform: Platform, rails: RailsServer
) -> None:
    _orgs(platform)
    tick = platform.tick(YESTERDAY_TICK)
    platform.flags.set("pause_api2_daily_agent_evaluation_reports", True)
    try:
        job_id = tick.job_id("2026-12-01T04:00Z")
        platform.router.enqueue(JobRequest(tick.kind, None, {"slot": "2026-12-01T04:00Z"}))
        with running_workers(platform, only=(tick.family_name,)):
            wait_until(lambda: platform.broker.jobs.record(job_id)["state"] == "skipped", 30)
    finally:
        platform.flags.set("pause_api2_daily_agent_evaluation_reports", False)
    assert _report_ids(platform) == set() and rails.requests == []


def test_one_organizations_failure_does_not_stop_the_others(
    platform: Platform, rails: RailsServer, slack: SlackServer
) -> None:
    orgs = _orgs(platform)
    rails.reject("/internal/daily_agent_evaluation_reports/backfill_preview", 422, times=1)
    _run_tick(platform, YESTERDAY_TICK, "2026-12-01T04:00Z")
    ids = sorted(_report_ids(platform))
    with running_workers(platform, only=(FAMILY,)):
        wait_until(
            lambda: all(
                platform.broker.jobs.record(i)["state"] in ("completed", "failed") for i in ids
            ),
            30,
        )
    states = [platform.broker.jobs.record(i)["state"] for i in ids]
    assert states.count("failed") == 1 and states.count("completed") == len(ids) - 1
    assert len(slack.messages) == len(ids) - 1
    assert len(ids) >= 3 and orgs


def test_the_evening_report_and_the_next_mornings_full_day_both_go_out(
    platform: Platform, slack: SlackServer
) -> None:
    """20:00Z "today" and the next 04:00Z "yesterday" are the same date in UTC: the same
    job id, replaced once the evening job finished, so both reports are posted."""
    with session_scope(platform.sessions) as session:
        org = new_org(session, time_zone="UTC")
        session.commit()
    job_id = f"daily-agent-eval-report-{org.id}-2026-12-01-no-email-bf"
    for tick_name, slot in (
        (TODAY_TICK, "2026-12-01T20:00Z"),
        (YESTERDAY_TICK, "2026-12-02T04:00Z"),
    ):
        _run_tick(platform, tick_name, slot)
        with running_workers(platform, only=(FAMILY,)):
            wait_until(lambda: platform.broker.jobs.record(job_id)["state"] == "completed", 30)
    headers = [m["blocks"][0]["text"]["text"] for m in slack.messages]
    assert sum(f"(#{org.id}) 2026-12-01" in h for h in headers) == 2
