"""Which attempt of its job a handler is running, for work that must act on the last one."""

from __future__ import annotations

from dataclasses import dataclass

from dramatiq.middleware import CurrentMessage

from tiers.options import FAILURES, WINDOW_RESERVATION
from tiers.policies import RetryPolicy


@dataclass(frozen=True)
class Attempt:
    number: int
    max_attempts: int

    @property
    def is_final(self) -> bool:
        """True when a failure now would not be retried."""
        return self.number >= self.max_attempts


def current_attempt(policy: RetryPolicy) -> Attempt:
    """The running job's attempt under ``policy`` (delays do not count; outside a worker,
    the first attempt)."""
    message = CurrentMessage.get_current_message()
    failures = int(message.options.get(FAILURES, 0)) if message is not None else 0
    return Attempt(number=failures + 1, max_attempts=policy.max_attempts)


def current_window_hold() -> str | None:
    """The running job's window reservation (``<key>#<window>``), if it carries one."""
    message = CurrentMessage.get_current_message()
    return message.options.get(WINDOW_RESERVATION) if message is not None else None
