"""Sentry cron monitors for ticks: one monitor per tick, two check-ins per slot.

=================  ==================================  =======================================
check-in           sent by                             when
=================  ==================================  =======================================
``in_progress``    the scheduler                       it emitted the slot (or skipped it,
                                                       paused)
``ok``             the tick's job (a worker)           the tick body returned
``error``          the tick's job (a worker)           the tick body raised
=================  ==================================  =======================================

The monitor's slug is the tick's name; every check-in carries its ``monitor_config`` (the
crontab, UTC, ``checkin_margin`` and ``max_runtime``), so Sentry creates or updates the monitor
from it. The check-in id is derived from the slot's job id (a UUID5), so the worker closes the
check-in the scheduler opened without the two sharing anything but the slot. Without Sentry
loaded (no ``SENTRY_DSN``) nothing is sent.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from shared.observability import send_checkin


class Monitored(Protocol):
    """What a monitor needs of a tick (``router.ticks.Tick``)."""

    @property
    def name(self) -> str: ...

    @property
    def cron(self) -> str: ...

    def job_id(self, slot: str) -> str: ...


Status = Literal["in_progress", "ok", "error"]
_IDS = uuid.UUID("6f1f8c1e-3d5a-4c8e-9b7a-5e2d1c0b9a87")


@dataclass(frozen=True)
class MonitorSettings:
    """``checkin_margin`` and ``max_runtime`` of every tick's monitor, in minutes
    (``SPEEDTIER_SENTRY_CHECKIN_MARGIN_MINUTES``, ``SPEEDTIER_SENTRY_MAX_RUNTIME_MINUTES``)."""

    checkin_margin_minutes: int = 5
    max_runtime_minutes: int = 30


def checkin_id(tick: Monitored, slot: str) -> str:
    """The check-in id of one slot, the same in the scheduler and the worker."""
    return uuid.uuid5(_IDS, tick.job_id(slot)).hex


def monitor_config(tick: Monitored, settings: MonitorSettings) -> dict[str, Any]:
    return {
        "schedule": {"type": "crontab", "value": tick.cron},
        "timezone": "UTC",
        "checkin_margin": settings.checkin_margin_minutes,
        "max_runtime": settings.max_runtime_minutes,
    }


def check_in(tick: Monitored, slot: str, status: Status, settings: MonitorSettings) -> None:
    """Send one check-in of ``tick``'s monitor for ``slot``."""
    send_checkin(
        monitor_slug=tick.name,
        check_in_id=checkin_id(tick, slot),
        status=status,
        monitor_config=monitor_config(tick, settings),
    )
