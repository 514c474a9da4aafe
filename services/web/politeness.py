"""Per-host politeness: at most so many requests a window to one host, across all workers."""

from __future__ import annotations

from services.web.urls import origin
from tiers.attempts import current_window_hold
from tiers.policies import WindowRule
from tiers.rate_window import RateWindows

#: One request a second per host, shared by every worker.
DEFAULT_HOST_RULE = WindowRule(1, 1.0)


class HostPoliteness:
    """At most ``rule.limit`` requests per window to one host, across all workers.

    A full window reserves the job a request in the first window with room and raises
    ``Delay`` to it (the attempt is not spent, and the job wakes once, not at every window).
    """

    def __init__(self, windows: RateWindows, rule: WindowRule = DEFAULT_HOST_RULE) -> None:
        self.windows = windows
        self.rule = rule

    def acquire(self, url: str, now: float | None = None) -> None:
        _, host, _ = origin(url)
        self.windows.take_or_delay(
            self.windows.key("crawl-host", host),
            self.rule,
            reason="host-politeness",
            held=current_window_hold(),
            now=now,
        )
