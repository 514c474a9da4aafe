"""Maintenance ticks: the slot reaper, and the routine families' schedulers (seed 001).

- ``group-slot-reaper`` (every minute): hands dead workers' slots to parked jobs.
- ``mark-expired-evaluations-failed-hourly`` (``5 * * * *``): ``POST
  /internal/expired_evaluations/process``, counts kept on its job record;
  ``pause_api2_expired_evaluation_cleanup``.
- ``unit21-sync`` (``*/10 * * * *``): one ``unit21-sync-source-<id>`` per kept Unit21
  source; ``pause_api2_unit21_sync``.
- ``counter-cache-fix`` (``0 */3 * * *``): enqueues ``counter-cache-fix``;
  ``pause_api2_counter_cache_repairs``.

A tick runs as a job of its own family, whose kill switch is read at emission and again when
it runs (skipped, not failed); the jobs it enqueues re-check theirs.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from router.enqueue import Router
from router.ticks import Tick, enqueue_tick
from services.maintenance import store
from services.maintenance.families import (
    PAUSE_COUNTER_CACHES,
    PAUSE_EXPIRED_EVALUATIONS,
    PAUSE_UNIT21,
    counter_cache_request,
    unit21_request,
)
from tiers.job_state import JobState, NotInAJob
from tiers.job_store import JobStore

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from services.rails.client import RailsClient

log = logging.getLogger(__name__)

EXPIRED_EVALUATIONS_TICK = "mark-expired-evaluations-failed-hourly"
#: The seed's cadences (UTC), read by the ticks below and by ``checks.schedulers``.
CADENCES = {
    EXPIRED_EVALUATIONS_TICK: "5 * * * *",
    "unit21-sync": "*/10 * * * *",
    "counter-cache-fix": "0 */3 * * *",
}
EXPIRED_EVALUATIONS_PATH = "/internal/expired_evaluations/process"


def group_slot_reaper(stores: Sequence[JobStore]) -> Tick:
    """Every minute, hand the group slots of workers that died to parked jobs, in each
    Redis of ``stores`` (one per Redis the tiers use).

    Workers reap on their own while any runs; this tick covers a tier whose workers are all
    gone (scaled to zero or crashed), so its parked jobs are not held until one returns.
    """

    def run(slot: str) -> dict[str, int]:
        reaped = 0
        for jobs in stores:
            while True:
                batch = jobs.reap()
                reaped += batch
                if batch == 0:
                    break
        log.info("group-slot reaper %s: %d slot(s) reaped", slot, reaped)
        return {"reaped": reaped}

    return Tick(
        name="group-slot-reaper",
        cron="* * * * *",
        run=run,
        description="return group slots whose lease ran out (dead workers) to parked jobs",
    )


def expired_evaluations_tick(rails: Callable[[], RailsClient], jobs: JobStore) -> Tick:
    """Rails runs the snapshot and QA-request timeout transitions and answers the candidate
    and failure counts, which the tick keeps on its job record (``speedtier jobs show``)."""

    def run(slot: str) -> dict[str, Any]:
        counts = rails().post(EXPIRED_EVALUATIONS_PATH, {"slot": slot})
        with contextlib.suppress(NotInAJob):  # a manual CLI run prints them instead
            JobState.current(jobs).set(counts=counts)
        log.info("%s %s: %s", EXPIRED_EVALUATIONS_TICK, slot, counts)
        return counts

    return Tick(
        name=EXPIRED_EVALUATIONS_TICK,
        cron=CADENCES[EXPIRED_EVALUATIONS_TICK],
        run=run,
        description="Rails marks expired snapshot and QA-request evaluations failed",
        pause_flag=PAUSE_EXPIRED_EVALUATIONS,
    )


def unit21_tick(sessions: sessionmaker[Session], router: Router) -> Tick:
    return enqueue_tick(
        name="unit21-sync",
        cron=CADENCES["unit21-sync"],
        description="one unit21-sync-source-<id> job per kept Unit21 organization data source",
        pause_flag=PAUSE_UNIT21,
        sessions=sessions,
        router=router,
        due=lambda session: [unit21_request(*row) for row in store.unit21_sources(session)],
    )


def counter_cache_tick(sessions: sessionmaker[Session], router: Router) -> Tick:
    return enqueue_tick(
        name="counter-cache-fix",
        cron=CADENCES["counter-cache-fix"],
        description="repair the seven counter caches (counter-cache-fix)",
        pause_flag=PAUSE_COUNTER_CACHES,
        sessions=sessions,
        router=router,
        due=lambda _session: [counter_cache_request()],
    )
