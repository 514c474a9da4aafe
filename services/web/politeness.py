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

    def acquire(
        self, url: str, now: float | None = None, at_least_seconds: float | None = None
    ) -> None:
        """Take a request of ``url``'s host window, or raise ``Delay`` to a reserved one.

        ``at_least_seconds`` (the host's robots.txt ``Crawl-delay``) is a lower bound on the
        interval between two requests: when the configured rule allows requests closer than
        that, the host's window becomes one request per ``at_least_seconds`` instead."""
        _, host, _ = origin(url)
        rule, key = self.rule, self.windows.key("crawl-host", host)
        if at_least_seconds and at_least_seconds > self.rule.period_seconds / self.rule.limit:
            rule = WindowRule(1, at_least_seconds)
            key = self.windows.key("crawl-host", host, f"every-{at_least_seconds:g}s")
        self.windows.take_or_delay(
            key, rule, reason="host-politeness", held=current_window_hold(), now=now
        )
