"""Ticks: scheduled jobs that each service declares next to its domain.

A tick only enqueues (or does one small sweep); it runs as a job of its own family on the
maintenance tier, with the slot id ``<name>-tick-<YYYY-MM-DDTHH:MMZ>`` and finished ids kept
for the retention, so a second scheduler, a restart or a retried emission of the same slot
runs once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from router.enqueue import Router, enqueue_settled
from router.requests import JobRequest
from router.tick_monitors import MonitorSettings, check_in
from shared.db.engine import session_scope
from shared.inputs import Text
from tiers.families import Family
from tiers.policies import RetryPolicy

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

SLOT_FORMAT = "%Y-%m-%dT%H:%MZ"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tick:
    """A cron-scheduled job.

    Attributes:
      name: kebab-case name, also the job id prefix (``kb-sync`` -> ``kb-sync-tick-...``).
      cron: five-field crontab expression, evaluated in UTC.
      run: the tick body; gets the slot id, returns a short summary for logs and the CLI.
      pause_flag: the family's kill switch, read at tick time and again at execution.
      description: one line for ``speedtier ticks``.
    """

    name: str
    cron: str
    run: Callable[[str], Any]
    description: str
    pause_flag: str | None = None

    @property
    def kind(self) -> str:
        return f"tick:{self.name}"

    @property
    def family_name(self) -> str:
        return self.name.replace("-", "_") + "_tick"

    def slot(self, fire_time: datetime) -> str:
        """The slot id of a fire time (minute resolution, UTC)."""
        return fire_time.astimezone(UTC).strftime(SLOT_FORMAT)

    def job_id(self, slot: str) -> str:
        return f"{self.name}-tick-{slot}"


def enqueue_tick(
    *,
    name: str,
    cron: str,
    description: str,
    pause_flag: str | None,
    sessions: sessionmaker[Session],
    router: Router,
    due: Callable[[Session], Sequence[JobRequest]],
) -> Tick:
    """A tick that reads the requests ``due`` in one session, then enqueues each on its own
    account (:func:`~router.enqueue.enqueue_settled`): one bad request is logged and the
    rest go on. Its summary counts the enqueue outcomes."""

    def run(slot: str) -> dict[str, int]:
        with session_scope(sessions) as session:
            requests = due(session)
        summary = enqueue_settled(router, requests).summary()
        log.info("%s %s: %s", name, slot, summary)
        return summary

    return Tick(name=name, cron=cron, run=run, description=description, pause_flag=pause_flag)


class TickParams(BaseModel):
    slot: Text = Field(min_length=1, max_length=64)


def tick_family(tick: Tick, monitor: MonitorSettings | None = None) -> Family:
    """The job family a tick's emissions run as; it closes the slot's Sentry check-in with
    ``ok`` or ``error`` (``router.tick_monitors``)."""
    settings = monitor or MonitorSettings()

    def handler(slot: str) -> None:
        try:
            summary = tick.run(slot)
        except BaseException:
            check_in(tick, slot, "error", settings)
            raise
        check_in(tick, slot, "ok", settings)
        log.info("tick %s slot %s: %s", tick.name, slot, summary)

    handler.__name__ = tick.family_name
    return Family(
        name=tick.family_name,
        kind=tick.kind,
        handler=handler,
        params=TickParams,
        job_id=lambda _org, params: tick.job_id(params.slot),
        fixed_tier="maintenance",
        pause_flag=tick.pause_flag,
        retry=RetryPolicy(max_attempts=3, base_seconds=30.0),
        keep_finished=True,
        tenant_scoped=False,
    )
