"""Rows, platform and workers for the maintenance tests (and the worker process the
kill-between-steps test runs)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import uuid
from collections.abc import Iterator
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from services.app.bootstrap import Platform
from shared.db.base import utcnow
from shared.db.models.rails import DataSource, Organization, OrganizationDataSource
from tests.platform_harness import serving
from tiers.faults import FAULT_ENV
from tiers.policies import RetryPolicy
from tiers.table import TIERS
from tiers.worker import serve

FAST = RetryPolicy(max_attempts=3, base_seconds=0.3)
FAST_RETRIES = {
    "unit21_sync": FAST,
    "conversation_summary": FAST,
    "counter_cache_fix": FAST,
    "mark_expired_evaluations_failed_hourly_tick": FAST,
}
RAILS_TOKEN = "rails-tkn"


def data_source(session: Session, key: str) -> int:
    row = session.execute(text("SELECT id FROM data_sources WHERE key = :k"), {"k": key}).first()
    if row is not None:
        return int(row[0])
    source = DataSource(key=key, name=key.title())
    session.add(source)
    session.flush()
    return source.id


def organization(session: Session) -> int:
    org = Organization(name=f"Org {uuid.uuid4().hex[:6]}")
    session.add(org)
    session.flush()
    return org.id


def organization_data_source(
    session: Session, organization_id: int, key: str, *, discarded: bool = False
) -> int:
    ods = OrganizationDataSource(
        organization_id=organization_id,
        data_source_id=data_source(session, key),
        name=key,
        discarded_at=utcnow() if discarded else None,
    )
    session.add(ods)
    session.flush()
    return ods.id


def clear_unit21_sources(sessions: sessionmaker[Session]) -> None:
    """Committed Unit21 sources of earlier tests would join every tick's selection."""
    with sessions() as session:
        session.execute(
            text(
                "DELETE FROM organization_data_sources WHERE data_source_id IN"
                " (SELECT id FROM data_sources WHERE key = 'unit21')"
            )
        )
        session.commit()


@contextlib.contextmanager
def running_workers(platform: Platform, *, threads: int = 4) -> Iterator[None]:
    """A real Dramatiq worker in a thread of this process, over every queue."""
    queues = [q for tier in TIERS for q in platform.registry.queues_of_tier(tier)]
    with serving(platform.broker, queues, threads=threads):
        yield


def _process_main(settings: dict[str, Any]) -> None:
    import dataclasses

    from services.app.bootstrap import bootstrap
    from shared.config import load_settings

    platform = bootstrap(load_settings(**settings), component="test-worker")
    by_name = platform.registry.by_name()
    for name, policy in FAST_RETRIES.items():
        by_name[name] = dataclasses.replace(by_name[name], retry=policy)
    queues = [q for tier in TIERS for q in platform.registry.queues_of_tier(tier)]
    serve(platform.broker, queues, threads=2, poll_ms=50, drain_seconds=5)


def start_platform_worker(
    settings: dict[str, Any], *, fault: str | None = None
) -> multiprocessing.process.BaseProcess:
    """The production services' worker in its own spawned process; ``fault`` arms a fault
    point there only (``SPEEDTIER_FAULT``)."""
    process = multiprocessing.get_context("spawn").Process(
        target=_process_main, args=(settings,), daemon=True
    )
    saved = os.environ.get(FAULT_ENV)
    if fault:
        os.environ[FAULT_ENV] = fault
    try:
        process.start()
    finally:
        if saved is None:
            os.environ.pop(FAULT_ENV, None)
        else:
            os.environ[FAULT_ENV] = saved
    return process
