"""Fixed-window rate counters in Redis, shared by every worker process."""

from __future__ import annotations

import time
from importlib import resources

import redis

from tiers.policies import WindowRule


class RateWindows:
    """Admit at most ``rule.limit`` starts per window of a scope, across all workers.

    One Lua call increments the current window's counter, sets its expiry and, when the
    window is full, takes the increment back and answers the window's end.
    """

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.namespace = namespace
        source = (resources.files("tiers") / "lua" / "window.lua").read_text()
        self._script = client.register_script(source)

    def key(self, *scope: str) -> str:
        return ":".join((self.namespace, "window", *scope))

    def acquire(self, key: str, rule: WindowRule, now: float | None = None) -> float | None:
        """Take one start from the window; returns None when admitted, else the epoch
        seconds at which the current window ends."""
        now_ms = int((time.time() if now is None else now) * 1000)
        period_ms = max(1, int(rule.period_seconds * 1000))
        reply = int(self._script(keys=[key], args=[rule.limit, period_ms, now_ms]))
        return None if reply == 0 else reply / 1000.0
