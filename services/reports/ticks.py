"""The two report ticks (04:00 UTC: yesterday, 20:00 UTC: today): their names, cadences and
slots. What a tick's job does is :mod:`services.reports.aggregate`, imported when it runs:
a worker registers the ticks without loading the reports' queries and the ORM models
(``router.deferred``).

Slots: a scheduled emission's slot is its UTC minute (``2026-12-01T04:00Z``); a re-drive's is
``redrive-<yesterday|today|YYYY-MM-DD>-<epoch>`` (``speedtier reports redrive``), resolved at
the moment it first runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from router.enqueue import Router
from router.ticks import SLOT_FORMAT, Tick
from services.reports.dates import TODAY, YESTERDAY, parse_day
from services.reports.families import PAUSE_FLAG

if TYPE_CHECKING:
    from services.reports.report_job import ReportsContext

YESTERDAY_TICK = "daily-agent-eval-report-yesterday"
TODAY_TICK = "daily-agent-eval-report-today"
#: The seed's cadences (UTC), read by the ticks below and by ``speedtier reports check``.
CADENCES = {YESTERDAY_TICK: "0 4 * * *", TODAY_TICK: "0 20 * * *"}
_REDRIVE = re.compile(r"^redrive-(yesterday|today|\d{4}-\d{2}-\d{2})-\d+$")


def tick_plan(slot: str, sentinel: str, now: datetime) -> tuple[str | date, datetime]:
    """What a slot asks for: the day (sentinel or literal date) and the instant to resolve
    it at (the slot's minute for a scheduled emission, ``now`` for a re-drive)."""
    match = _REDRIVE.match(slot)
    if match:
        return parse_day(match.group(1)), now
    try:
        return sentinel, datetime.strptime(slot, SLOT_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return sentinel, now


def report_ticks(context: Callable[[], ReportsContext], router: Router) -> list[Tick]:
    """The two ticks; ``context`` gives the reports' context when a tick's job runs."""

    def make(name: str, sentinel: str) -> Tick:
        def run(slot: str) -> dict[str, Any]:
            from services.reports.aggregate import run_tick

            return run_tick(context(), router, slot, sentinel)

        return Tick(
            name=name,
            cron=CADENCES[name],
            run=run,
            description=f"daily agent evaluation reports for {sentinel}, in each org's zone",
            pause_flag=PAUSE_FLAG,
        )

    return [make(YESTERDAY_TICK, YESTERDAY), make(TODAY_TICK, TODAY)]
