"""Kill switches read at execution: a job of a paused family completes as skipped."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any

from dramatiq.broker import Broker
from dramatiq.middleware import Middleware

from shared.errors import Delay, Paused
from tiers.families import Family, family_of
from tiers.middleware.held import Held
from tiers.outage_log import OutageLog

log = logging.getLogger(__name__)

#: How long a job waits when its family's kill switch cannot be read (PostgreSQL down), plus
#: up to half again at random so the waiting jobs do not all come back at once.
UNREADABLE_DELAY_SECONDS = 5.0


class PauseSwitch(Middleware):
    """Stop with :class:`Paused` before a run when the family's flag is on.

    Parameters:
      families: actor name -> family.
      is_enabled: reads a flag (Flipper's tables with the environment override).
    """

    def __init__(self, families: Mapping[str, Family], is_enabled: Callable[[str], bool]) -> None:
        self.families = families
        self.is_enabled = is_enabled
        # A flag that cannot be read warns once, every 30 s while it lasts and once when it
        # is read again (every job of the family meanwhile tries it: one warning each would
        # flood the log for the length of a PostgreSQL outage).
        self._outages: dict[str, OutageLog] = {}
        self._lock = threading.Lock()

    def before_process_message(self, broker: Broker, message: Any) -> None:
        family = family_of(message, self.families)
        if family is None or not family.pause_flag:
            return
        try:
            paused = self.is_enabled(family.pause_flag)
        except Exception as exc:
            # Unread, the switch might be raised: do not run. Its store being down says
            # nothing about the job, so it waits without spending an attempt.
            wait = UNREADABLE_DELAY_SECONDS * (1 + random.random() / 2)
            delay = Delay.after(wait, reason="kill switch unreadable", source="outage")
            with self._lock:
                outage = self._outages.get(family.pause_flag)
                if outage is None:
                    outage = self._outages[family.pause_flag] = OutageLog(
                        log, f"kill switch {family.pause_flag}", recovered_as="read again"
                    )
                outage.failed("unreadable, its jobs delayed", exc)
            raise Held(delay) from exc
        outage = self._outages.get(family.pause_flag)
        if outage is not None and outage.failures:
            with self._lock:
                outage.recovered()
        if paused:
            raise Held(Paused(family.pause_flag))
