"""Kill switches read at execution: a job of a paused family completes as skipped."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from typing import Any

from dramatiq.broker import Broker
from dramatiq.middleware import Middleware

from shared.errors import Delay, Paused
from tiers.families import Family, family_of
from tiers.middleware.held import Held

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
            log.warning("kill switch %s unreadable (%s); job delayed", family.pause_flag, exc)
            raise Held(delay) from exc
        if paused:
            raise Held(Paused(family.pause_flag))
