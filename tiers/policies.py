"""Retry policies and rate windows as data; each family names its own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class RetryPolicy:
    """How many attempts a job gets and how long to wait between them.

    ``exponential``: ``base_seconds * 2 ** (attempts_made - 1)`` (seed 000: 3 attempts from 60 s).
    ``polynomial``: ``attempts_made ** 4 * 1000 + 2000`` ms (seed 001 uploads, Rails'
    ``polynomially_longer``).

    Delays do not spend attempts, but not forever (like Sidekiq Enterprise's cap on a
    limiter's reschedules): a streak of consecutive delays counts as one failed attempt
    once it holds more than ``max_consecutive_delays`` provider delays, or once it began
    more than ``max_delayed_seconds`` ago (provider and outage delays; platform pacing
    never counts, see ``shared.errors.Delay``). The attempt is then retried with backoff
    like any failure, with a fresh streak, and the last one fails the job. A provider that
    answers 429 forever thus ends the job after ``max_attempts`` streaks.

    One provider delay is bounded too: a ``Retry-After`` longer than ``max_delay_seconds``
    (a provider answering ``86400``) waits ``max_delay_seconds`` and is logged, so a job is
    never parked for a day on one answer; the provider is asked again then, and answers
    ``429`` again if it meant it (that delay counts toward the streak like any other).
    """

    max_attempts: int = 3
    backoff: Literal["exponential", "polynomial"] = "exponential"
    base_seconds: float = 60.0
    max_backoff_seconds: float = 6 * 3600.0
    max_consecutive_delays: int = 20
    max_delayed_seconds: float = 6 * 3600.0
    max_delay_seconds: float = 3600.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.max_consecutive_delays < 1:
            raise ValueError("a retry policy needs at least one attempt and one delay")
        if self.max_delayed_seconds <= 0:
            raise ValueError("max_delayed_seconds must be positive")
        if self.max_delay_seconds <= 0:
            raise ValueError("max_delay_seconds must be positive")

    def bounded_delay_until(self, until: float, now: float) -> float:
        """``until`` (epoch seconds), no later than ``max_delay_seconds`` from ``now``."""
        return min(until, now + self.max_delay_seconds)

    def delay_spends_attempt(
        self, source: str, streak: int, streak_since: float | None, now: float
    ) -> bool:
        """Whether one more delay from ``source`` ends the attempt, for a job whose current
        streak already holds ``streak`` counted provider delays and began at
        ``streak_since`` (epoch seconds; None: no streak yet)."""
        if source == "pacing":
            return False
        if source == "provider" and streak + 1 > self.max_consecutive_delays:
            return True
        return streak_since is not None and now - streak_since > self.max_delayed_seconds

    def backoff_seconds(self, attempts_made: int) -> float:
        """Seconds to wait after the ``attempts_made``-th failed attempt."""
        if attempts_made < 1:
            raise ValueError("attempts_made starts at 1")
        if self.backoff == "polynomial":
            seconds = (attempts_made**4 * 1000 + 2000) / 1000
        else:
            seconds = self.base_seconds * 2 ** (attempts_made - 1)
        return float(min(seconds, self.max_backoff_seconds))


DEFAULT_RETRY = RetryPolicy()
UPLOAD_RETRY = RetryPolicy(max_attempts=5, backoff="polynomial")


@dataclass(frozen=True)
class WindowRule:
    """At most ``limit`` starts per fixed window of ``period_seconds``, shared by every worker."""

    limit: int
    period_seconds: float

    def __post_init__(self) -> None:
        if self.limit < 1 or self.period_seconds <= 0:
            raise ValueError("a window needs a positive limit and period")
