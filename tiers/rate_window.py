"""Fixed-window rate counters in Redis, shared by every worker process."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

import redis

from shared.errors import Delay
from tiers.options import WINDOW_RESERVATION
from tiers.policies import WindowRule

#: How far ahead (in windows) a throttled start may be reserved.
MAX_WINDOWS_AHEAD = 10_000


@dataclass(frozen=True)
class Admission:
    """The answer of :meth:`RateWindows.reserve`.

    ``admitted``: start now, counted in window ``window_index``. Otherwise start at
    ``start_at`` (epoch seconds), holding the reservation ``reserved_index`` when one was
    made (None: nothing was free far enough ahead; try again then).
    """

    admitted: bool
    start_at: float
    reserved_index: int | None
    window_index: int | None = None


@dataclass(frozen=True)
class WindowGuard:
    """A window (:meth:`RateWindows.key`, ``rule``) a call goes ahead under only while its
    current window has counted fewer than ``rule.limit``; read, never counted.

    The enqueue script checks it in its own call (``tiers/lua/enqueue.lua``) when the window
    lives on the Redis the call goes to; otherwise ``read`` checks it alone first, under its
    owner's rules (what an unreachable Redis means): the epoch seconds at which the full
    window ends, or None to go ahead.
    """

    key: str
    rule: WindowRule
    read: Callable[[], float | None]

    def script_args(self) -> list[str | int]:
        """The guard's arguments to a script that checks it: key prefix, limit, period (ms)."""
        return [self.key, self.rule.limit, max(1, int(self.rule.period_seconds * 1000))]


class RateWindows:
    """Admit at most ``rule.limit`` starts per window of a scope, across all workers.

    One Lua call increments the current window's counter, sets its expiry and, when the
    window is full, takes the increment back and answers the window's end.
    """

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.namespace = namespace
        self._client = client
        lua = resources.files("tiers") / "lua"
        self._script = client.register_script((lua / "window.lua").read_text())
        self._reserve = client.register_script((lua / "window_reserve.lua").read_text())

    def key(self, *scope: str) -> str:
        return ":".join((self.namespace, "window", *scope))

    def acquire(self, key: str, rule: WindowRule, now: float | None = None) -> float | None:
        """Take one start from the window; returns None when admitted, else the epoch
        seconds at which the current window ends."""
        now_ms = int((time.time() if now is None else now) * 1000)
        period_ms = max(1, int(rule.period_seconds * 1000))
        reply = int(self._script(keys=[key], args=[rule.limit, period_ms, now_ms]))
        return None if reply == 0 else reply / 1000.0

    def used(self, key: str, rule: WindowRule, now: float | None = None) -> tuple[int, float]:
        """How many starts the current window of ``key`` has counted (:meth:`acquire`'s
        window; at most ``rule.limit``), and the epoch seconds at which it ends."""
        now_ms = int((time.time() if now is None else now) * 1000)
        period_ms = max(1, int(rule.period_seconds * 1000))
        index = now_ms // period_ms
        value = self._client.get(f"{key}:{index}")
        return (int(value) if value is not None else 0), (index + 1) * period_ms / 1000.0

    def reserve(
        self,
        key: str,
        rule: WindowRule,
        *,
        reserved_index: int | None = None,
        now: float | None = None,
    ) -> Admission:
        """Take one start now, or reserve one in the first future window with room.

        ``reserved_index`` is a reservation an earlier call made for this start: in its
        window the start is admitted without counting again (it was counted when reserved);
        a reservation whose window has passed is counted as lapsed (:meth:`lapsed`) and the
        start counted anew.
        """
        now_ms = int((time.time() if now is None else now) * 1000)
        period_ms = max(1, int(rule.period_seconds * 1000))
        code, index = self._reserve(
            keys=[key],
            args=[
                rule.limit,
                period_ms,
                now_ms,
                -1 if reserved_index is None else reserved_index,
                MAX_WINDOWS_AHEAD,
            ],
        )
        code, index = int(code), int(index)
        if code == 0:
            return Admission(True, now_ms / 1000.0, None, window_index=index)
        return Admission(False, index * period_ms / 1000.0, index if code == 1 else None)

    def lapsed(self, key: str) -> int:
        """Reservations of ``key``'s windows that lapsed (their window passed before their
        job woke) in the last day: starts counted but never made, capacity lost."""
        value = self._client.get(f"{key}:lapsed")
        return int(value) if value is not None else 0

    def take_or_delay(
        self,
        key: str,
        rule: WindowRule,
        *,
        reason: str,
        held: str | None,
        jitter: float = 0.1,
        now: float | None = None,
    ) -> str:
        """Take a start for the running job, or raise :class:`Delay` to a start reserved for
        it (the reservation rides on the delayed message as ``st_wres``).

        Parameters:
          held: the job's reservation tag (``<key>#<window>``) from its message, if any.
          jitter: when nothing could be reserved, wake within this share of a period.

        Returns:
          the tag of the window that admitted the start (``<key>#<window>``).
        """
        held_key, _, held_index = (held or "").rpartition("#")
        reserved = int(held_index) if held_key == key and held_index.isdigit() else None
        admission = self.reserve(key, rule, reserved_index=reserved, now=now)
        if admission.admitted:
            return f"{key}#{admission.window_index}"
        if admission.reserved_index is not None:
            # Its own start is counted in that window: wake exactly then, once.
            carry = {WINDOW_RESERVATION: f"{key}#{admission.reserved_index}"}
            raise Delay(admission.start_at, reason=reason, carry=carry, source="pacing")
        spread = random.uniform(0, jitter * rule.period_seconds)
        raise Delay(admission.start_at + spread, reason=reason, source="pacing")
