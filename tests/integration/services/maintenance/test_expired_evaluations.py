"""The expired-evaluation sweep: registered at :05 UTC on the maintenance tier, Rails'
counts kept on the tick's job record, Rails' failures retried, the switch skipping it."""

from __future__ import annotations

from router.requests import JobRequest
from services.app.bootstrap import Platform
from services.maintenance.families import PAUSE_EXPIRED_EVALUATIONS
from services.maintenance.ticks import EXPIRED_EVALUATIONS_PATH, EXPIRED_EVALUATIONS_TICK
from testkit.fakes.rails_server import RailsServer
from tests.integration.services.maintenance.factories import running_workers
from tests.platform_harness import wait_until

COUNTS = {
    "snapshots": {"candidates": 4, "failures": 1},
    "qa_evaluation_requests": {"candidates": 2, "failures": 0},
}


def _emit(platform: Platform, slot: str) -> str:
    tick = platform.tick(EXPIRED_EVALUATIONS_TICK)
    platform.router.enqueue(JobRequest(tick.kind, None, {"slot": slot}))
    return tick.job_id(slot)


def _state(platform: Platform, job_id: str) -> str:
    return (platform.broker.jobs.record(job_id) or {}).get("state", "")


def test_registered_hourly_at_five_past_on_the_maintenance_tier(platform: Platform) -> None:
    tick = platform.tick(EXPIRED_EVALUATIONS_TICK)
    assert tick.cron == "5 * * * *" and tick.pause_flag == PAUSE_EXPIRED_EVALUATIONS
    family = platform.registry.by_name()[tick.family_name]
    assert family.fixed_tier == "maintenance" and family.retry.max_attempts == 3


def test_the_counts_rails_returns_are_kept_on_the_job_record(
    platform: Platform, rails: RailsServer
) -> None:
    rails.results[EXPIRED_EVALUATIONS_PATH] = COUNTS
    rails.reject(EXPIRED_EVALUATIONS_PATH, 503, "PG::ConnectionBad", retryable=True)
    job_id = _emit(platform, "2026-12-01T10:05Z")
    with running_workers(platform):
        wait_until(lambda: _state(platform, job_id) == "completed", timeout=30)
    record = platform.broker.jobs.record(job_id) or {}
    assert record["failures"] == "1"  # the 503 spent one attempt, the retry succeeded
    assert '"candidates": 4' in record["data:counts"]
    assert len(rails.calls(EXPIRED_EVALUATIONS_PATH)) == 2


def test_the_switch_skips_the_sweep_at_run_time(platform: Platform, rails: RailsServer) -> None:
    job_id = _emit(platform, "2026-12-01T11:05Z")
    platform.flags.set(PAUSE_EXPIRED_EVALUATIONS, True)
    try:
        with running_workers(platform):
            wait_until(lambda: _state(platform, job_id) == "skipped")
    finally:
        platform.flags.set(PAUSE_EXPIRED_EVALUATIONS, False)
    assert rails.calls(EXPIRED_EVALUATIONS_PATH) == []
