"""The enqueue API benchmark's verdicts are computed from its steps, round by round."""

from __future__ import annotations

from typing import Any

from bench.enqueue_api_report import summary, targets


def _step(concurrency: int, rate: float, round_: int | None = None, **extra: Any) -> dict[str, Any]:
    step = {
        "server": "api",
        "body_requests": 1,
        "concurrency": concurrency,
        "requests_per_second": rate,
        "jobs_per_second": rate,
        "p50_ms": 1.0,
        "p99_ms": 3.0,
        "non_202": {},
        "connections_per_worker": None,
        "client_cores": 0.1,
        "server_cores": 1.0,
        "redis_cores": 0.2,
        "server_cpu_ms_per_request": 0.5,
        "load_average_1m": 0.5,
        **extra,
    }
    if round_ is not None:
        step["round"] = round_
    return step


def test_one_round_judges_its_one_pair() -> None:
    found = targets([_step(1, 900), _step(8, 2000), _step(32, 1960)])
    assert found["no_drop"] == {"from": 8, "to": 32, "ratio": 0.98, "rounds": [0.98]}
    assert not found["no_drop_met"]


def test_rounds_are_paired_within_themselves_and_judged_by_their_median() -> None:
    steps = [
        _step(8, 2000, 1),
        _step(32, 1900, 1),  # 0.95
        _step(32, 2100, 2),
        _step(8, 2000, 2),  # 1.05
        _step(8, 1000, 3),
        _step(32, 1020, 3),  # 1.02: a slow round, still a pair of its own
    ]
    found = targets(steps)
    assert found["no_drop"]["rounds"] == [0.95, 1.05, 1.02]
    assert found["no_drop"]["ratio"] == 1.02
    assert found["no_drop_met"]
    assert "median of 3 rounds: 0.95, 1.05, 1.02" in summary(
        {
            "steps": steps,
            "targets": found,
            "settings": {"workers": 2, "threads": 4, "access_log": True, "load": "wrk"},
        }
    )


def test_a_round_missing_either_side_is_left_out() -> None:
    found = targets([_step(8, 2000, 1), _step(32, 1900, 1), _step(32, 5000, 2)])
    assert found["no_drop"]["rounds"] == [0.95]


def test_failed_steps_do_not_count() -> None:
    found = targets([_step(8, 2000), _step(32, 2500, non_202={"503": 4})])
    assert found["no_drop"] is None
    assert not found["no_drop_met"]
