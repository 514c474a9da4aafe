"""The Organizations page's rows: each busy (family, organization) group with its predicted
next start (``prediction``), made honest by ``serving`` (no worker for the tier, a paused
family)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from services.app.bootstrap import Platform
from services.app.dashboard import serving
from services.app.dashboard.prediction import RATE_MINUTES, Rates, positions, predict
from services.app.dashboard.snapshot import take_snapshot
from tiers.run_rates import recent_minutes


def recent_minutes_of(platform: Platform, now: float) -> list[tuple[int, Counter[str]]]:
    """The run rates' minutes, summed over each tier's Redis."""
    by_minute: dict[int, Counter[str]] = {}
    for broker, _tiers in platform.brokers.serving():
        ns = platform.settings.redis_namespace
        for minute, counts in recent_minutes(broker.client, ns, RATE_MINUTES, now):
            by_minute.setdefault(minute, Counter()).update(counts)
    return sorted(by_minute.items())


def org_rows(platform: Platform, owner: str | None = None) -> list[dict[str, Any]]:
    """Each busy group's row and its predicted next start (only ``owner``'s, when given)."""
    snapshot = take_snapshot(platform)
    ns = platform.settings.redis_namespace
    now = time.time()
    rates = Rates(recent_minutes_of(platform, now), now)
    ahead: dict[str, int] = {}
    for broker, tiers in platform.brokers.serving():
        mine = [group for group in snapshot.groups if group.tier in tiers]
        ahead.update(positions(broker.client, ns, mine))
    lengths = {row.queue: row.waiting for row in snapshot.queues}
    rows = []
    busy = [g for g in snapshot.groups if g.running or g.waiting or g.parked]
    if owner is not None:
        busy = [g for g in busy if g.owner == owner]
    service = serving.service(platform)
    for group in sorted(busy, key=lambda g: (g.owner, g.family, g.tier)):
        prediction = predict(group, rates, ahead.get(group.key), lengths.get(group.queue, 0))
        prediction = service.honest(group.family, group.tier, prediction)
        runs = rates.totals[f"g:{group.key}"]
        rows.append({"group": group, "prediction": prediction, "runs": runs})
    return rows
