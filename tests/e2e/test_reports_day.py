"""A day of daily agent evaluation reports on real worker processes (the scenario of
``python -m bench.reports_day``, ``testkit/reports_scenario.py``): 50 organizations in 12
time zones, the 04:00 and 20:00 UTC ticks of a simulated day each emitted twice, admin sends
with email, Slack 500 and 429 and a Rails 500 injected, a worker SIGKILLed mid-run; every
report goes out exactly once per channel."""

from __future__ import annotations

import pytest

from testkit.reports_scenario import DayConfig, run_day


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_day_of_reports_for_50_organizations_in_12_zones_sends_each_once(
    redis_url: str,
) -> None:
    result = run_day(DayConfig(organizations=50), redis_url)
    assert result["problems"] == []
    assert result["zones"] == 12 and result["reports"] == 2 * 50 + 10
    assert result["slack_messages"] == result["reports"]
    assert result["per_org_emails"] == 10 and result["combined_emails"] == 2
    assert result["workers_killed"] == 1
