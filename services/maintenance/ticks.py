"""Maintenance ticks."""

from __future__ import annotations

import logging

from router.ticks import Tick
from tiers.job_store import JobStore

log = logging.getLogger(__name__)


def group_slot_reaper(jobs: JobStore) -> Tick:
    """Every minute, hand the group slots of workers that died to parked jobs.

    Workers reap on their own while any runs; this tick covers a tier whose workers are all
    gone (scaled to zero or crashed), so its parked jobs are not held until one returns.
    """

    def run(slot: str) -> dict[str, int]:
        reaped = 0
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
