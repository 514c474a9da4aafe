"""Every row of the outcomes table, classified without a broker (no I/O)."""

from __future__ import annotations

import time

import pytest
from dramatiq.message import Message

from shared.errors import Delay, Paused, RecordMissing, Retryable, Unrecoverable
from tiers.middleware.held import Held
from tiers.middleware.outcomes import classify
from tiers.options import ETA, FAILURES, JOB_ID, WINDOW_RESERVATION
from tiers.policies import RetryPolicy

POLICY = RetryPolicy(max_attempts=3, base_seconds=10.0)


def message(failures: int = 0) -> Message[object]:
    options = {JOB_ID: "job-1", FAILURES: failures, WINDOW_RESERVATION: "w#1"}
    return Message(queue_name="f.fast", actor_name="f", args=(), kwargs={}, options=options)


@pytest.mark.parametrize(
    ("exception", "state", "error"),
    [
        (None, "completed", ""),
        (RecordMissing("gone"), "record_missing", "RecordMissing: gone"),
        (Paused("pause_api2_f"), "skipped", "Paused: paused by flag pause_api2_f"),
        (Held(Paused("pause_api2_f")), "skipped", "Paused: paused by flag pause_api2_f"),
        (Unrecoverable("401"), "failed", "Unrecoverable: 401"),
    ],
)
def test_final_outcomes_spend_no_attempt_and_send_nothing_back(
    exception: BaseException | None, state: str, error: str
) -> None:
    settlement = classify(message(failures=1), exception, POLICY)
    assert (settlement.state, settlement.failures, settlement.next_message) == (state, 1, None)
    assert (settlement.error, settlement.delay) == (error, "")


def test_a_delay_comes_back_at_its_time_without_spending_an_attempt() -> None:
    until = time.time() + 30
    settlement = classify(message(failures=1), Held(Delay(until, "window", {"k": "v"})), POLICY)
    assert (settlement.state, settlement.failures, settlement.error) == ("delayed", 1, "")
    assert settlement.delay.startswith("window: ")
    again = settlement.next_message
    assert again.queue_name == "f.fast.DQ"
    assert again.options[ETA] == int(until * 1000)
    assert again.options["k"] == "v"


def test_a_failure_is_retried_with_backoff_until_the_attempts_run_out() -> None:
    before = time.time()
    settlement = classify(message(failures=0), Retryable("503"), POLICY)
    assert (settlement.state, settlement.failures) == ("delayed", 1)
    assert settlement.error == "Retryable: 503"
    again = settlement.next_message
    assert again.options[FAILURES] == 1
    assert again.options[WINDOW_RESERVATION] is None
    assert again.options[ETA] >= int((before + 10) * 1000)
    last = classify(message(failures=2), ValueError("boom"), POLICY)
    assert (last.state, last.failures, last.next_message) == ("failed", 3, None)
    assert last.error == "ValueError: boom"
