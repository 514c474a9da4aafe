"""Durable job state on the Redis job record: read back by a later attempt, refused to a
superseded copy, gone when a finished id is enqueued again, and run_steps skipping what is
done (the kill-between-steps proof on real worker processes is in
tests/integration/services/maintenance/test_counter_caches.py)."""

from __future__ import annotations

import pytest

from router.enqueue import Router
from router.requests import JobRequest
from tiers.broker import TierBroker
from tiers.job_state import JobState, NotInAJob, StaleJobCopy, run_steps


def test_state_is_kept_and_steps_already_done_are_skipped(
    broker: TierBroker, router: Router
) -> None:
    router.enqueue(JobRequest("t_plain", 1, {"item": "a"}))
    state = JobState(broker.jobs, "plain-a")
    ran: list[str] = []

    def step(name: str) -> str:
        ran.append(name)
        return name.upper()

    state.set(resolved_dates={"7": "2026-11-30"})
    state.complete_step("collect", {"rows": 3})
    results = run_steps(state, [(n, lambda n=n: step(n)) for n in ("collect", "slack", "email")])
    assert ran == ["slack", "email"]
    assert results == {"collect": {"rows": 3}, "slack": "SLACK", "email": "EMAIL"}
    again = JobState(broker.jobs, "plain-a")  # another attempt reads it back
    assert list(again.completed_steps()) == ["collect", "slack", "email"]
    assert again.get("resolved_dates") == {"7": "2026-11-30"}


def test_a_superseded_copy_cannot_write(broker: TierBroker, router: Router) -> None:
    router.enqueue(JobRequest("t_plain", 1, {"item": "b"}))
    with pytest.raises(StaleJobCopy):
        JobState(broker.jobs, "plain-b", redis_message_id="not-the-current-copy").set(x=1)
    with pytest.raises(StaleJobCopy):
        JobState(broker.jobs, "never-enqueued").complete_step("x")


def test_a_replaced_job_starts_from_nothing(broker: TierBroker, router: Router) -> None:
    router.enqueue(JobRequest("t_plain", 1, {"item": "c"}))
    JobState(broker.jobs, "plain-c").complete_step("collect")
    broker.client.hset(broker.jobs.record_key("plain-c"), "state", "completed")
    assert router.enqueue(JobRequest("t_plain", 1, {"item": "c"})).outcome == "replaced"
    assert JobState(broker.jobs, "plain-c").completed_steps() == {}


def test_outside_a_running_job_there_is_no_current_state(broker: TierBroker) -> None:
    with pytest.raises(NotInAJob):
        JobState.current(broker.jobs)
