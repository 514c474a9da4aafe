"""What ``speedtier up`` starts: the API, the scheduler and a worker per tier (no I/O; the
process group itself runs real children in ``tests/e2e/test_supervisor.py``)."""

from __future__ import annotations

import sys

from services.app.cli.up import process_specs
from shared.config import TIER_NAMES


def test_up_runs_the_api_the_scheduler_and_a_worker_per_tier() -> None:
    specs = process_specs("redis://r:1/0", "postgresql://p@h:2/d", host="0.0.0.0", port=9000)

    assert [spec.name for spec in specs] == [
        "api",
        "scheduler",
        *(f"worker.{tier}" for tier in TIER_NAMES),
    ]
    assert specs[0].argv[1:] == [
        "-m",
        "services.app.cli",
        "api",
        "--host",
        "0.0.0.0",
        "--port",
        "9000",
    ]
    assert specs[-1].argv[-2:] == ["--tier", TIER_NAMES[-1]]
    for spec in specs:
        assert spec.argv[0] == sys.executable
        assert spec.env is not None
        assert spec.env["REDIS_URL"] == "redis://r:1/0"
        assert spec.env["DATABASE_URL"] == "postgresql://p@h:2/d"
        assert spec.env["SPEEDTIER_ENV"] == "development"
