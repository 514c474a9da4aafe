"""Scrape-time gauges the API adds beside the queue depth (``tiers.queue_depth``), for the
chart's alerts.

=================================================  ============================================
gauge                                              what it is
=================================================  ============================================
``speedtier_tick_due_timestamp_seconds{tick}``     the tick's most recent fire time (its cron,
                                                   UTC) at or before the scrape
``speedtier_tick_emitted_timestamp_seconds{tick}`` the fire time of the slot the scheduler last
                                                   emitted (``<ns>:scheduler:emissions``; a
                                                   paused tick's skipped slot counts); absent
                                                   until the tick's first emission
``speedtier_postgresql_up``                        1 when ``SELECT 1`` answered within the
                                                   readiness timeout, else 0
=================================================  ============================================

A tick whose due time stays ahead of its emitted one has been missed: the scheduler emits a
slot within a second of its fire time (``TickMissed`` waits 10 minutes). Labels are tick names
only. One short-lived PostgreSQL connection per scrape, as the readiness probe opens.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

import redis
from prometheus_client.core import GaugeMetricFamily, Metric

from router.ticks import SLOT_FORMAT
from services.app.bootstrap import Platform
from services.app.readiness import postgresql_error
from services.app.scheduler import emissions_key, previous_fire_time
from tiers.job_store import as_text

log = logging.getLogger(__name__)


class TickGauges:
    """Each tick's due and last emitted fire times, from the tick table and the scheduler's
    emission notes on the control Redis."""

    def __init__(self, platform: Platform, clock: Callable[[], datetime] | None = None) -> None:
        self.platform = platform
        self.clock = clock or (lambda: datetime.now(UTC))

    def collect(self) -> Iterable[Metric]:
        due = GaugeMetricFamily(
            "speedtier_tick_due_timestamp_seconds",
            "The tick's most recent fire time at or before the scrape (epoch seconds).",
            labels=["tick"],
        )
        emitted = GaugeMetricFamily(
            "speedtier_tick_emitted_timestamp_seconds",
            "Fire time of the tick's slot the scheduler last emitted (epoch seconds).",
            labels=["tick"],
        )
        now = self.clock()
        for tick in self.platform.ticks:
            fire = previous_fire_time(tick.cron, now)
            if fire is not None:
                due.add_metric([tick.name], fire.timestamp())
        try:
            notes = self.platform.broker.client.hgetall(emissions_key(self.platform))
        except redis.RedisError as exc:
            log.warning("tick gauges: redis unreachable (%s)", exc)
            notes = {}
        for name, note in notes.items():
            slot = _slot_time(as_text(note))
            if slot is not None:
                emitted.add_metric([as_text(name)], slot.timestamp())
        yield due
        yield emitted


def _slot_time(note: str) -> datetime | None:
    try:
        slot = json.loads(note)["slot"]
        return datetime.strptime(slot, SLOT_FORMAT).replace(tzinfo=UTC)
    except (ValueError, KeyError, TypeError):
        return None


class PostgresqlGauge:
    """``speedtier_postgresql_up``: can this API process reach PostgreSQL now?"""

    def __init__(self, database_url: str | None) -> None:
        self.database_url = database_url

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "speedtier_postgresql_up", "1 when PostgreSQL answered SELECT 1 at the scrape, else 0."
        )
        error = postgresql_error(self.database_url)
        if error is not None:
            log.warning("postgresql gauge: %s", error)
        up.add_metric([], 0 if error else 1)
        yield up
