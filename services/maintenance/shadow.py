"""Shadow runs of the native counter-cache repairs beside Rails' ``#fix`` (the Scientist
pattern).

With PostHog ``api2_counter_cache_native_repairs_shadow`` on in the region while the repair
still runs through Rails, each step that has a native repair is measured around Rails'
call, read-only: how many parents the native definition finds out of parity before the call
(what the native repair would fix), how many Rails says it fixed, and how many the native
definition still finds out of parity after it. The native repair itself never runs.

| measured | meaning |
| --- | --- |
| ``native_would_fix`` | parents out of parity by the native definition, before Rails' call |
| ``rails_fixed`` | the ``fixed`` count Rails answers |
| ``drift_after`` | parents still out of parity by the native definition, after it |

A run matches when ``native_would_fix == rails_fixed`` and ``drift_after == 0``.

``drift_after > 0`` means Rails' counter is not the native definition (a wrong guess of
the counter); a count mismatch with ``drift_after == 0`` can also be a write between the
two reads, so one divergence is a reason to look, and the bake wants none. Runs are kept
in a Redis list (the last :data:`KEEP` runs, for :data:`KEEP_SECONDS`):
``speedtier maintenance parity`` lists them and exits 1 while any diverged (or none ran);
``speedtier maintenance check`` fails while the last 24 hours hold a divergence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.observability import current_job
from shared.parity import KeptShadowRun, ParityRun, ParitySource
from tiers.job_store import JobStore

#: The last runs kept, and for how long (past a 24-hour bake window).
KEEP = 500
KEEP_SECONDS = 8 * 86_400
SHADOW_WINDOW = timedelta(hours=24)


def log_key(jobs: JobStore) -> str:
    return f"{jobs.namespace}:shadow:counter-cache-fix"


def comparison(step: str, before: int, answer: dict[str, Any], after: int) -> dict[str, Any]:
    """One step's shadow record."""
    fixed = answer.get("fixed")
    job = current_job.get()
    return {
        "ran_at": datetime.now(UTC).isoformat(),
        "job_id": job.get("job_id") if job else None,
        "step": step,
        "native_would_fix": before,
        "rails_fixed": fixed,
        "drift_after": after,
        "matched": fixed == before and after == 0,
    }


def record(jobs: JobStore, run: dict[str, Any]) -> None:
    """Append one comparison (best effort is the caller's choice)."""
    key = log_key(jobs)
    pipe = jobs.client.pipeline()
    pipe.lpush(key, json.dumps(run, sort_keys=True))
    pipe.ltrim(key, 0, KEEP - 1)
    pipe.expire(key, KEEP_SECONDS)
    pipe.execute()


@dataclass(frozen=True)
class ShadowRun(KeptShadowRun):
    """One kept comparison of a counter repair step with Rails' #fix."""

    def describe(self) -> str:
        r = self.record
        return (
            f"{r['ran_at']} {r['step']}: native would fix {r['native_would_fix']}, rails fixed"
            f" {r['rails_fixed']}, out of parity after {r['drift_after']}"
        )


def shadow_runs(jobs: JobStore, since: datetime) -> list[ShadowRun]:
    """The kept comparisons since ``since``, oldest first."""
    raw = jobs.client.lrange(log_key(jobs), 0, KEEP - 1)
    runs = [ShadowRun(json.loads(item)) for item in raw]
    return sorted((run for run in runs if run.ran_at >= since), key=lambda run: run.ran_at)


def parity_source(jobs: JobStore) -> ParitySource:
    """The counter-repair shadow runs as the dashboard's Parity page reads them (a run
    measures the region, not one organization)."""

    def read(since: datetime) -> list[ParityRun]:
        return [_parity(run) for run in shadow_runs(jobs, since)]

    return read


def _parity(run: ShadowRun) -> ParityRun:
    r = run.record
    found: list[str] = []
    if r["native_would_fix"] != r["rails_fixed"]:
        found.append(
            f"count: native would fix {r['native_would_fix']}, rails fixed {r['rails_fixed']}"
        )
    if r["drift_after"]:
        found.append(f"rows: {r['drift_after']} parents out of parity after rails' fix")
    return ParityRun(
        product="maintenance",
        organization_id=None,
        ran_at=run.ran_at,
        matched=run.matched,
        subject=f"counter step {r['step']}",
        summary=f"native would fix {r['native_would_fix']}, rails fixed {r['rails_fixed']}, "
        f"out of parity after {r['drift_after']}",
        differences=tuple(found),
        job_id=r.get("job_id"),
    )
