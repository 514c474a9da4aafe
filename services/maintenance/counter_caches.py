"""One counter-cache repair run (Rails' FixCounterCachesJob, seed 001).

==========================================  ==============================================
what happens                                 outcome
==========================================  ==============================================
the advisory lock is free                    the seven steps run in the seed's order, each
                                             marked completed on the job record as it ends
the lock is held (Rails or another run)      Delay 5 minutes, attempt not spent
a step fails                                 the job retries; the retry runs only the steps
                                             not yet completed
``api2_counter_cache_native_repairs`` on     the steps in :data:`~services.maintenance.store
in this region (read once per job, kept      .NATIVE_COUNTERS` run as SQL here; the others
on its record so a retry uses the same       still call ``POST /internal/counter_caches/fix``
engine)
``..._shadow`` on in this region, engine    each step with a native repair is measured
``rails``                                    read-only around Rails' call
                                             (:mod:`~services.maintenance.shadow`)
==========================================  ==============================================

The lock is session-level (``pg_try_advisory_lock(hashtextextended('fix_counter_caches',
0))``) on a dedicated autocommit connection, so no transaction stays open across the Rails
calls, and Rails' rollback path sees the same lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from services.maintenance import shadow, store
from services.rails.client import RailsClient
from shared.db.engine import session_scope
from shared.errors import Delay
from shared.flags import Flags
from shared.rollouts import COUNTER_CACHE_NATIVE_REPAIRS, COUNTER_CACHE_NATIVE_REPAIRS_SHADOW
from tiers.job_state import JobState, run_steps
from tiers.job_store import JobStore

log = logging.getLogger(__name__)

#: The seed's order.
STEPS = (
    "assignment_queue_memberships",
    "group_employees",
    "employees",
    "credit_usages",
    "conversations",
    "sheet_rows",
    "evaluation_sampling_rule_counters",
)
CONTENDED_DELAY_SECONDS = 300.0
FIX_PATH = "/internal/counter_caches/fix"
#: Rollout flags are per organization; the counter-cache flag's release condition is a
#: region, so the run is evaluated as this pseudo-organization.
REGION_SUBJECT = 0


@contextmanager
def advisory_lock(engine: Engine) -> Iterator[bool]:
    """Try the shared lock on a dedicated autocommit connection; yields whether it is held,
    and releases it (or drops the connection, which releases it) at the end."""
    with engine.connect() as raw:
        connection = raw.execution_options(isolation_level="AUTOCOMMIT")
        held = store.try_counter_cache_lock(connection)
        try:
            yield held
        finally:
            if held:
                try:
                    store.release_counter_cache_lock(connection)
                except Exception:
                    # Never hand a connection still holding the lock back to the pool:
                    # closing its session releases the lock.
                    raw.invalidate()
                    raise


@dataclass(frozen=True)
class CounterCacheRun:
    engine: Engine
    sessions: sessionmaker[Session]
    rails: Callable[[], RailsClient]
    flags: Flags
    region: str | None
    #: Where shadow runs are kept (:mod:`services.maintenance.shadow`); None: no shadow.
    jobs: JobStore | None = None

    def run(self, state: JobState) -> dict[str, Any]:
        with advisory_lock(self.engine) as held:
            if not held:
                raise Delay.after(
                    CONTENDED_DELAY_SECONDS, reason="fix_counter_caches lock held", source="pacing"
                )
            engine = state.get("engine")
            if engine is None:
                native = self.flags.rollout(
                    COUNTER_CACHE_NATIVE_REPAIRS, organization_id=REGION_SUBJECT, region=self.region
                )
                engine = "native" if native else "rails"
                state.set(engine=engine, region=self.region)
            measured = engine == "rails" and self._shadowed()
            steps = [(step, self._step(step, engine, measured)) for step in STEPS]
            return run_steps(state, steps)

    def _shadowed(self) -> bool:
        return self.jobs is not None and self.flags.rollout(
            COUNTER_CACHE_NATIVE_REPAIRS_SHADOW, organization_id=REGION_SUBJECT, region=self.region
        )

    def _step(self, step: str, engine: str, measured: bool) -> Callable[[], Any]:
        if engine == "native" and step in store.NATIVE_COUNTERS:
            return lambda: {"engine": "native", "fixed": self._native(step)}
        if measured and step in store.NATIVE_COUNTERS:
            return lambda: {"engine": "rails", **self._rails_with_shadow(step)}
        return lambda: {"engine": "rails", **self.rails().post(FIX_PATH, {"step": step})}

    def _rails_with_shadow(self, step: str) -> dict[str, Any]:
        """Rails' ``#fix`` of ``step``, measured read-only by the native definition before
        and after; a failed measurement is logged and never fails the repair."""
        try:
            before: int | None = self._drift(step)
        except Exception:
            log.warning("counter cache shadow of %s: measuring before failed", step, exc_info=True)
            before = None
        answer = self.rails().post(FIX_PATH, {"step": step})
        if before is not None and self.jobs is not None:
            try:
                shadow.record(self.jobs, shadow.comparison(step, before, answer, self._drift(step)))
            except Exception:
                log.warning("counter cache shadow of %s: recording failed", step, exc_info=True)
        return answer

    def _drift(self, step: str) -> int:
        with session_scope(self.sessions) as session:
            store.limit_statements(session, "5min")
            session.execute(text("SET TRANSACTION READ ONLY"))
            try:
                return store.counter_drift(session, step)
            finally:
                session.rollback()

    def _native(self, step: str) -> int:
        with session_scope(self.sessions) as session:
            store.limit_statements(session, "5min")
            fixed = store.repair_counter(session, step)
            session.commit()
        log.info("counter cache %s repaired natively: %d fixed", step, fixed)
        return fixed
