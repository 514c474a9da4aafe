"""The first six hours of a day of maintenance ticks on real worker processes (the scenario of
``python -m bench.maintenance_day``, ``testkit/maintenance_scenario.py``): Unit21 every ten
minutes, the :05 sweep, the 00:00, 03:00 and 06:00 counter-cache runs, each slot emitted
twice; a worker SIGKILLed right after a repair step and replaced; the 06:00 run contended by
a second session holding the advisory lock."""

from __future__ import annotations

import pytest

from testkit.maintenance_scenario import MaintenanceDay, run_day


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_six_hours_of_maintenance_ticks_sync_every_source_and_repair_once_per_run(
    redis_url: str,
) -> None:
    config = MaintenanceDay(organizations=4, sources_per_organization=2, minutes=6 * 60 + 1)
    result = run_day(config, redis_url)
    assert result["problems"] == []
    assert result["unit21_rounds"] == 37 and result["sweeps"] == 6
    assert result["unit21_syncs"] >= 37 * 8
    # three runs; the three native steps never reach Rails, the four others once per run
    assert result["rails_fix_calls_by_step"] == {
        "employees": 3,
        "credit_usages": 3,
        "conversations": 3,
        "evaluation_sampling_rule_counters": 3,
    }
    assert result["contended_run"]["failures"] == "0"
    assert result["workers_replaced"] >= 1
    assert set(result["parity"].values()) == {0}
