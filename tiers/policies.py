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
    """

    max_attempts: int = 3
    backoff: Literal["exponential", "polynomial"] = "exponential"
    base_seconds: float = 60.0
    max_backoff_seconds: float = 6 * 3600.0

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
