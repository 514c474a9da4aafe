"""Provider windows: a start that does not fit its window is delayed, never failed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dramatiq.broker import Broker
from dramatiq.middleware import Middleware

from shared import metrics
from shared.errors import Delay, Retryable
from tiers.families import Family, family_of
from tiers.middleware.held import Held
from tiers.middleware.job_metrics import tier_of_queue
from tiers.options import PROVIDER, WINDOW_ADMITTED, WINDOW_RESERVATION, WINDOW_SCOPE
from tiers.policies import WindowRule
from tiers.rate_window import RateWindows

WINDOW_DELAYS = metrics.counter(
    "window_delays", "Starts delayed because their provider window was full.", ["family", "tier"]
)


class ProviderWindows(Middleware):
    """Take one start from the job's window, keyed ``window:<family>:<provider>:<scope>``
    like the retired throttle keys. When the window is full the job reserves a start in the
    first future window with room and is delayed to that window's start (once; the
    reservation rides on the message). Only when nothing is free within
    ``MAX_WINDOWS_AHEAD`` windows is it delayed to the next window with a jitter of up to
    ``jitter`` of the period.

    Parameters:
      families: actor name -> family.
      windows: the rate counters.
      overrides: ``<family>.<provider>`` (or ``<family>.*``) -> rule, from configuration.
    """

    def __init__(
        self,
        families: Mapping[str, Family],
        windows: RateWindows,
        overrides: Mapping[str, WindowRule] | None = None,
        jitter: float = 0.1,
    ) -> None:
        self.families = families
        self.windows = windows
        self.overrides = dict(overrides or {})
        self.jitter = jitter

    def before_process_message(self, broker: Broker, message: Any) -> None:
        family = family_of(message, self.families)
        if family is None:
            return
        provider = message.options.get(PROVIDER)
        rule = family.window_for(provider, self.overrides)
        if rule is None:
            return
        scope = message.options.get(WINDOW_SCOPE) or "*"
        key = self.windows.key(family.name, (provider or "*").lower(), str(scope))
        try:
            admitted = self.windows.take_or_delay(
                key,
                rule,
                reason="window",
                held=message.options.get(WINDOW_RESERVATION),
                jitter=self.jitter,
            )
        except Delay as delay:
            WINDOW_DELAYS.labels(family.name, tier_of_queue(message.queue_name)).inc()
            raise Held(delay) from None
        except Exception as exc:
            # An unchecked window could let a storm through: retry under the policy instead.
            raise Held(Retryable(f"window {key} unreadable: {exc}")) from exc
        # Which window counted this run, for logs and for checking the limit held.
        message.options[WINDOW_ADMITTED] = admitted
