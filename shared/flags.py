"""Kill switches shared with Rails through Flipper's PostgreSQL tables, and the rollout
flags (PostHog, per organization and region) beside them.

A flag is on when ``flipper_gates`` holds its boolean gate (``key = 'boolean'``,
``value = 'true'``), which is what ``Flipper.enable(:name)`` writes, so a flag raised in a
Rails console pauses this service too. ``SPEEDTIER_FLAGS`` overrides the tables (local use).

:meth:`Flags.rollout` reads a PostHog rollout flag (``shared.rollouts``) for one
organization in one region; ``SPEEDTIER_FLAGS`` overrides those too (for every organization).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence

from sqlalchemy import Engine, text

from shared.rollouts import PostHogRollouts

_ENABLED_OF = text(
    "SELECT DISTINCT feature_key FROM flipper_gates"
    " WHERE feature_key = ANY(:names) AND key = 'boolean' AND value = 'true'"
)
_ADD_FEATURE = text(
    "INSERT INTO flipper_features (key, created_at, updated_at) VALUES (:name, now(), now())"
    " ON CONFLICT (key) DO NOTHING"
)
_ADD_GATE = text(
    "INSERT INTO flipper_gates (feature_key, key, value, created_at, updated_at)"
    " VALUES (:name, 'boolean', 'true', now(), now())"
    " ON CONFLICT (feature_key, key, value) DO NOTHING"
)
_DROP_GATE = text("DELETE FROM flipper_gates WHERE feature_key = :name AND key = 'boolean'")


class Flags:
    """Reads and writes Flipper boolean gates, caching reads for ``cache_seconds``.

    A flag read while another thread of the process is reading it waits for that read
    instead of sending its own: a worker that starts reads its tier's kill switches ahead
    (``services.app.warm_up``, all of them in one statement), and its first job, which
    may come before that read is answered, takes the answer rather than opening a second
    database connection for the same row (at a scale-out, as many connections fewer as
    processes start).

    Parameters:
      engine: the PostgreSQL engine holding Flipper's tables.
      overrides: flag -> forced value (from ``SPEEDTIER_FLAGS``); wins over the tables.
      cache_seconds: how long a read is reused; 0 reads the table every time.
      rollouts: the PostHog rollout flags; None: every rollout flag is off.
    """

    def __init__(
        self,
        engine: Engine,
        overrides: Mapping[str, bool] | None = None,
        cache_seconds: float = 2.0,
        rollouts: PostHogRollouts | None = None,
    ) -> None:
        self.engine = engine
        self.rollouts = rollouts
        self.overrides = dict(overrides or {})
        self.cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, bool]] = {}
        self._lock = threading.Lock()
        #: flag -> set once the read of it in flight is over (answered or failed).
        self._reading: dict[str, threading.Event] = {}

    def is_enabled(self, name: str) -> bool:
        """Whether the flag is on (override first, then the table through the cache).

        Raises:
          the database's error when the flag must be read and cannot be (a read that
          another thread had in flight and that failed is tried again here).
        """
        if name in self.overrides:
            return self.overrides[name]
        for _ in range(2 if self.cache_seconds > 0 else 0):
            cached, reading = self._cached_or_reading(name)
            if cached is not None:
                return cached
            if reading is None:
                break
            reading.wait()
        return self.read_many([name])[name]

    def states(self, names: Iterable[str]) -> dict[str, bool]:
        """Whether each flag of ``names`` is on, as :meth:`is_enabled` says (override first,
        then the cache), by name, the flags neither overridden nor fresh in the cache read
        together in one statement: a page listing every kill switch makes one read, not one
        each.

        Raises:
          the database's error when flags must be read and cannot be.
        """
        states: dict[str, bool] = {}
        unread: list[str] = []
        for name in sorted(set(names)):
            if name in self.overrides:
                states[name] = self.overrides[name]
                continue
            cached = self._cached_or_reading(name)[0] if self.cache_seconds > 0 else None
            if cached is None:
                unread.append(name)
            else:
                states[name] = cached
        if unread:
            states.update(self.read_many(unread))
        return dict(sorted(states.items()))

    def read_many(self, names: Sequence[str]) -> dict[str, bool]:
        """Read flags ``names`` from the table in one statement, cache each, and return
        them (a flag ``SPEEDTIER_FLAGS`` overrides is not read: it is not returned)."""
        names = sorted({name for name in names if name not in self.overrides})
        if not names:
            return {}
        mine = threading.Event()
        with self._lock:
            for name in names:
                self._reading.setdefault(name, mine)
        now = time.monotonic()
        try:
            with self.engine.connect() as connection:
                on = set(connection.scalars(_ENABLED_OF, {"names": names}))
            values = {name: name in on for name in names}
            with self._lock:
                for name, value in values.items():
                    self._cache[name] = (now, value)
            return values
        finally:
            with self._lock:
                for name in names:
                    if self._reading.get(name) is mine:
                        del self._reading[name]
            mine.set()

    def _cached_or_reading(self, name: str) -> tuple[bool | None, threading.Event | None]:
        """The flag's cached value if still fresh, else the read of it in flight (if any)."""
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(name)
            if cached is not None and now - cached[0] < self.cache_seconds:
                return cached[1], None
            return None, self._reading.get(name)

    def rollout(self, name: str, *, organization_id: int, region: str | None = None) -> bool:
        """Whether PostHog rollout flag ``name`` is on for ``organization_id`` in ``region``
        (default: this deployment's ``SPEEDTIER_REGION``). Off when PostHog is not configured
        or unreachable (fail closed); ``SPEEDTIER_FLAGS`` wins for every organization."""
        if name in self.overrides:
            return self.overrides[name]
        if self.rollouts is None:
            return False
        return self.rollouts.is_enabled(name, organization_id=organization_id, region=region)

    def set(self, name: str, enabled: bool) -> None:
        """Raise or lower a flag in Flipper's tables (what ``speedtier pause|resume`` do)."""
        with self.engine.begin() as connection:
            if enabled:
                connection.execute(_ADD_FEATURE, {"name": name})
                connection.execute(_ADD_GATE, {"name": name})
            else:
                connection.execute(_DROP_GATE, {"name": name})
        with self._lock:
            self._cache.pop(name, None)
