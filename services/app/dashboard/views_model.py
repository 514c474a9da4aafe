"""The windows and schedule pages' data: provider windows now and over the last hour, and
each tick's last and next slot with how its last emission and run ended."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from services.app.bootstrap import Platform, window_overrides
from services.app.scheduler import emissions_key, latest_fire_time, next_fire_time
from tiers.job_store import as_text
from tiers.run_rates import recent_counts

#: Ticks fire at least weekly; a last slot is looked for this far back.
LOOKBACK = (3600.0, 86_400.0, 8 * 86_400.0)


@dataclass(frozen=True)
class WindowUse:
    key: str
    family: str
    provider: str
    scope: str
    limit: int | None
    period_seconds: float | None
    now: int
    last_hour: int

    @property
    def hour_capacity(self) -> int | None:
        if self.limit is None or not self.period_seconds:
            return None
        return int(self.limit * 3600 / self.period_seconds)


def window_uses(platform: Platform, now: float | None = None) -> list[WindowUse]:
    """Every window that admitted a start in the last hour: its use in the current window
    (starts counted, reservations included) and its starts over the hour."""
    moment = time.time() if now is None else now
    ns = platform.settings.redis_namespace
    counts = recent_counts(platform.broker.client, ns, 59, moment)
    families = platform.registry.by_name()
    overrides = window_overrides(platform.settings)
    uses = []
    for field_name, last_hour in sorted(counts.items()):
        if not field_name.startswith("w:"):
            continue
        key = field_name[2:]
        # ``<ns>:window:<family>:<provider>:<scope>`` (tiers.middleware.windows)
        parts = key.removeprefix(f"{ns}:window:").split(":", 2)
        family_name, provider, scope = [*parts, "", ""][:3]
        family = families.get(family_name)
        rule = family.window_for(provider, overrides) if family else None
        current = 0
        if rule is not None:
            index = int(moment * 1000) // max(1, int(rule.period_seconds * 1000))
            value = platform.broker.client.get(f"{key}:{index}")
            current = int(value) if value is not None else 0
        uses.append(
            WindowUse(
                key,
                family_name,
                provider,
                scope,
                rule.limit if rule else None,
                rule.period_seconds if rule else None,
                current,
                last_hour,
            )
        )
    return uses


@dataclass(frozen=True)
class TickRow:
    name: str
    cron: str
    description: str
    pause_flag: str | None
    last_slot: str | None
    next_slot: str | None
    run_state: str  # the job record of the last slot's run
    run_error: str
    emission: str  # what the scheduler noted at its last emission


def _last_fire(cron: str, now: datetime) -> datetime | None:
    for lookback in LOOKBACK:
        fire = latest_fire_time(cron, now, lookback)
        if fire is not None:
            return fire
    return None


def tick_rows(platform: Platform, now: datetime | None = None) -> list[TickRow]:
    moment = now or datetime.now(UTC)
    client = platform.broker.client
    notes = {
        as_text(k): json.loads(as_text(v))
        for k, v in client.hgetall(emissions_key(platform)).items()
    }
    rows = []
    for tick in sorted(platform.ticks, key=lambda t: t.name):
        last = _last_fire(tick.cron, moment)
        nxt = next_fire_time(tick.cron, moment + timedelta(seconds=1))
        last_slot = tick.slot(last) if last else None
        record = platform.broker.jobs.record(tick.job_id(last_slot)) if last_slot else None
        note = notes.get(tick.name)
        emission = (
            f"slot {note.get('slot')}: {note.get('outcome')} at {note.get('at')}"
            if isinstance(note, dict)
            else "none noted"
        )
        rows.append(
            TickRow(
                tick.name,
                tick.cron,
                tick.description,
                tick.pause_flag,
                last_slot,
                tick.slot(nxt) if nxt else None,
                (record or {}).get("state", "not run (no record)"),
                (record or {}).get("last_error", ""),
                emission,
            )
        )
    return rows
