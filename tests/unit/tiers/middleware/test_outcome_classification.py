"""Every row of the outcomes table, classified without a broker (no I/O)."""

from __future__ import annotations

import time

import pytest
from dramatiq.message import Message

from shared.errors import (
    Cancelled,
    Delay,
    DeliveryLost,
    Paused,
    RecordMissing,
    Retryable,
    Unrecoverable,
)
from tiers.attempts import Attempt
from tiers.middleware.held import Held
from tiers.middleware.outcomes import classify
from tiers.options import (
    CHECKPOINT,
    DELAY_SINCE,
    DELAY_STREAK,
    ETA,
    FAILURES,
    JOB_ID,
    WINDOW_RESERVATION,
)
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
        (Cancelled("cancelled by ann"), "cancelled", "Cancelled: cancelled by ann"),
        (Held(Cancelled("cancelled by ann")), "cancelled", "Cancelled: cancelled by ann"),
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


def test_a_lost_delivery_comes_back_without_spending_an_attempt() -> None:
    # (its settle is refused when a newer run holds the job; when none does, the job runs
    # again rather than end unrun)
    settlement = classify(message(failures=1), DeliveryLost("run 2 was delivered again"), POLICY)
    assert (settlement.state, settlement.failures, settlement.error) == ("delayed", 1, "")
    assert settlement.delay.startswith("delivery lost: ")
    assert settlement.next_message.queue_name == "f.fast.DQ"


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


# -- delays have an end --------------------------------------------------------------------

CAPPED = RetryPolicy(max_attempts=2, base_seconds=10.0, max_consecutive_delays=2)


def delayed_again(
    msg: Message[object], delay: Delay, policy: RetryPolicy = CAPPED
) -> Message[object]:
    settlement = classify(msg, delay, policy)
    assert settlement.state == "delayed" and settlement.error == ""
    again: Message[object] = settlement.next_message
    return again


def test_provider_delays_past_the_limit_spend_the_attempt_then_fail_the_job() -> None:
    # Given a job whose provider answers 429 + Retry-After every time
    msg = message(failures=0)
    for _ in range(2):
        msg = delayed_again(msg, Delay.after(1, "retry-after"))
    assert msg.options[DELAY_STREAK] == 2
    # When the third delay comes, the streak passes the limit: a failed attempt, retried
    spent = classify(msg, Delay.after(1, "retry-after"), CAPPED)
    assert (spent.state, spent.failures) == ("delayed", 1)
    assert spent.error.startswith("DelaysExhausted: 2 provider delay(s)")
    retry = spent.next_message
    assert (retry.options[DELAY_STREAK], retry.options[DELAY_SINCE]) == (0, None)
    # And the next streak on the last attempt fails the job for good
    msg = retry
    for _ in range(2):
        msg = delayed_again(msg, Delay.after(1, "retry-after"))
    last = classify(msg, Delay.after(1, "retry-after"), CAPPED)
    assert (last.state, last.failures, last.next_message) == ("failed", 2, None)


def test_pacing_never_counts_and_keeps_the_streak() -> None:
    # Given a job one provider delay short of the limit
    msg = delayed_again(message(), Delay.after(1, "retry-after"))
    msg = delayed_again(msg, Delay.after(1, "retry-after"))
    since = msg.options[DELAY_SINCE]
    # When platform windows park it a hundred times, nothing is spent and nothing resets
    for _ in range(100):
        msg = delayed_again(msg, Delay.after(1, "window", source="pacing"))
    assert (msg.options[DELAY_STREAK], msg.options[DELAY_SINCE]) == (2, since)
    assert msg.options[FAILURES] == 0
    # Then the next provider delay is the one past the limit
    assert classify(msg, Delay.after(1, "retry-after"), CAPPED).failures == 1


def test_outage_delays_count_by_age_only() -> None:
    policy = RetryPolicy(max_attempts=3, max_consecutive_delays=1, max_delayed_seconds=60.0)
    msg = message()
    # Many outage delays in a short streak spend nothing: their cadence is ours
    for _ in range(10):
        msg = delayed_again(msg, Delay.after(1, "outage", source="outage"), policy)
    assert msg.options[DELAY_STREAK] == 0
    # But a streak older than max_delayed_seconds spends the attempt
    msg.options[DELAY_SINCE] = time.time() - 61
    spent = classify(msg, Delay.after(1, "outage", source="outage"), policy)
    assert (spent.state, spent.failures) == ("delayed", 1)
    assert spent.error.startswith("DelaysExhausted")


def test_a_lost_connection_starts_an_outage_streak() -> None:
    import psycopg

    try:
        psycopg.connect("postgresql://127.0.0.1:1/none", connect_timeout=2)
    except psycopg.OperationalError as exc:
        outage = exc
    again = classify(message(), outage, CAPPED).next_message
    assert again.options[DELAY_STREAK] == 0 and again.options[DELAY_SINCE] is not None


def test_the_attempt_tells_a_handler_when_a_delay_would_end_the_job() -> None:
    delay = Delay.after(1, "retry-after")
    first = Attempt(number=1, max_attempts=2, streak=2, streak_since=time.time(), policy=CAPPED)
    last = Attempt(number=2, max_attempts=2, streak=2, streak_since=time.time(), policy=CAPPED)
    assert first.delay_spends_attempt(delay) and not first.delay_ends_job(delay)
    assert last.delay_ends_job(delay)
    assert not last.delay_ends_job(Delay.after(1, "window", source="pacing"))


def test_a_delay_that_carries_a_new_checkpoint_is_progress_not_a_stall() -> None:
    # Given a job at its limit of provider delays
    msg = delayed_again(message(), Delay.after(1, "retry-after"))
    msg = delayed_again(msg, Delay.after(1, "retry-after"))
    # When its next delay comes after committed progress (a new checkpoint)
    progressed = Delay(time.time() + 1, "retry-after", carry={CHECKPOINT: "page-7"})
    again = delayed_again(msg, progressed)
    # Then the streak starts again from that delay, and the checkpoint rides along
    assert (again.options[DELAY_STREAK], again.options[CHECKPOINT]) == (1, "page-7")
    # But a delay with the same checkpoint is no progress
    same = Delay(time.time() + 1, "retry-after", carry={CHECKPOINT: "page-7"})
    again = delayed_again(again, same)
    assert classify(again, same, CAPPED).failures == 1


def test_a_retry_keeps_the_checkpoint() -> None:
    msg = delayed_again(message(), Delay(time.time() + 1, "retry-after", {CHECKPOINT: "p2"}))
    retried = classify(msg, Retryable("503"), CAPPED).next_message
    assert retried.options[CHECKPOINT] == "p2"


@pytest.mark.parametrize("source", ["provider", "pacing"])
def test_a_provider_delay_longer_than_the_ceiling_waits_the_ceiling(source: str) -> None:
    # Given a provider that says Retry-After: 86400 (and a platform window as far off)
    policy = RetryPolicy(max_delay_seconds=3600.0)
    before = time.time()
    settlement = classify(message(), Delay.after(86400, "retry-after", source=source), policy)
    # Then a provider delay waits the ceiling, attempt kept; pacing keeps its own time
    assert (settlement.state, settlement.failures) == ("delayed", 0)
    eta_seconds = settlement.next_message.options[ETA] / 1000 - before
    if source == "provider":
        assert 3599 <= eta_seconds <= 3601 + (time.time() - before)
        assert "bounded to" in settlement.delay
    else:
        assert eta_seconds >= 86399


def test_a_provider_delay_under_the_ceiling_is_kept() -> None:
    until = time.time() + 120
    settlement = classify(message(), Delay(until, "retry-after"), RetryPolicy())
    assert settlement.next_message.options[ETA] == int(until * 1000)
    assert "bounded" not in settlement.delay
