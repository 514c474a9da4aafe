"""Which attempt of its job a handler is running, for work that must act on the last one."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dramatiq.middleware import CurrentMessage

from shared.errors import Delay
from tiers.options import CHECKPOINT, DELAY_SINCE, DELAY_STREAK, FAILURES, WINDOW_RESERVATION
from tiers.policies import DEFAULT_RETRY, RetryPolicy


@dataclass(frozen=True)
class Attempt:
    """One attempt of a job: its number, and the streak of delays it has met so far.

    Attributes:
      streak: provider delays since the last attempt ended (``st_delays``).
      streak_since: epoch seconds the current streak of counted delays began, if any.
    """

    number: int
    max_attempts: int
    streak: int = 0
    streak_since: float | None = None
    policy: RetryPolicy = field(default=DEFAULT_RETRY, compare=False)

    @property
    def is_final(self) -> bool:
        """True when a failure now would not be retried."""
        return self.number >= self.max_attempts

    def delay_spends_attempt(self, delay: Delay, now: float | None = None) -> bool:
        """True when raising ``delay`` now ends this attempt as a failure (the streak
        passed the family's limit; see :class:`~tiers.policies.RetryPolicy`)."""
        moment = time.time() if now is None else now
        return self.policy.delay_spends_attempt(
            delay.source, self.streak, self.streak_since, moment
        )

    def delay_ends_job(self, delay: Delay, now: float | None = None) -> bool:
        """True when raising ``delay`` now fails the job for good: it spends the last
        attempt. A handler that must leave a terminal state behind (a document not left
        in ``processing``) treats the delay as its final failure then."""
        return self.is_final and self.delay_spends_attempt(delay, now)


def delay_streak(options: Mapping[str, Any]) -> tuple[int, float | None]:
    """The delay streak a message carries: (counted provider delays, epoch it began)."""
    since = options.get(DELAY_SINCE)
    return int(options.get(DELAY_STREAK) or 0), float(since) if since is not None else None


_running = threading.local()


def set_running_policy(policy: RetryPolicy | None) -> None:
    """Record the retry policy the platform settles the running job under (the outcomes
    middleware calls this around each run), so handlers read the same limits."""
    _running.policy = policy


def current_attempt(policy: RetryPolicy) -> Attempt:
    """The running job's attempt (delays do not count; outside a worker, the first).

    The policy is the one the platform settles the run under (its family's, as
    configured); ``policy`` applies only outside a worker run."""
    policy = getattr(_running, "policy", None) or policy
    message = CurrentMessage.get_current_message()
    options: Mapping[str, Any] = message.options if message is not None else {}
    streak, since = delay_streak(options)
    return Attempt(
        number=int(options.get(FAILURES, 0)) + 1,
        max_attempts=policy.max_attempts,
        streak=streak,
        streak_since=since,
        policy=policy,
    )


def current_checkpoint() -> str | None:
    """The running job's checkpoint: where a long unit resumes, as it carried it on its last
    ``Delay`` (``Delay(..., carry={CHECKPOINT: ...})``); None for a fresh run. Retries keep
    it, so a unit that committed its progress before the delay resumes after it."""
    message = CurrentMessage.get_current_message()
    value = message.options.get(CHECKPOINT) if message is not None else None
    return str(value) if value else None


def current_window_hold() -> str | None:
    """The running job's window reservation (``<key>#<window>``), if it carries one."""
    message = CurrentMessage.get_current_message()
    return message.options.get(WINDOW_RESERVATION) if message is not None else None
