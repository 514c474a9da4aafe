"""The chaos suite's bounded subset (``python -m bench.chaos --quick``): real worker
processes, a Redis of its own with AOF, faults injected mid-run. Every figure must be zero:
nothing lost, nothing completed twice, nothing stuck, no attempt spent on a fault."""

from __future__ import annotations

import pytest

from bench.chaos.__main__ import QUICK, run
from tests.fixtures_db import SERVER_URL


@pytest.mark.parametrize("scenario", list(QUICK))
def test_chaos_scenario_loses_nothing_and_repeats_nothing(scenario: str) -> None:
    row = run(scenario, SERVER_URL, QUICK[scenario])
    assert (row.lost, row.duplicated, row.stuck, row.extra_attempts) == (0, 0, 0, 0), row
