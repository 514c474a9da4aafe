"""The windows, job and schedule pages' data: provider windows now and over the last hour, a
job's window, and each tick's last and next slot with how its last emission and run ended."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from dramatiq.common import dq_name, q_name, xq_name
from dramatiq.message import Message

from services.app.bootstrap import Platform, window_overrides
from services.app.scheduler import emissions_key, next_fire_time, previous_fire_time
from tiers.job_store import as_text
from tiers.options import PROVIDER, WINDOW_ADMITTED, WINDOW_RESERVATION, WINDOW_SCOPE
from tiers.run_rates import recent_counts


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
    counts: Counter[str] = Counter()
    for broker, _tiers in platform.brokers.serving():  # each tier's runs count on its Redis
        counts.update(recent_counts(broker.client, ns, 59, moment))
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
        if rule is not None:  # the windows themselves are on the control Redis
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
class JobWindow:
    """The window a job's starts are counted in, read from its current message."""

    provider: str
    scope: str
    key: str
    rule: str
    reserved: str  # a start reserved in a future window (``st_wres``), if any
    admitted: str  # the window that counted its last run (on a delayed copy), if any


def job_window(platform: Platform, record: dict[str, str]) -> JobWindow | None:
    """The job's window, from its message wherever it now waits (its queue, delay queue,
    group's parked list or dead letters); None when the message is gone (a finished job) or
    its family has no window."""
    family = platform.registry.by_name().get(record.get("family", ""))
    cur, queue = record.get("cur", ""), record.get("queue", "")
    if family is None or not cur or not queue:
        return None
    ns = platform.settings.redis_namespace
    base = q_name(queue)
    places = [f"{ns}:{base}.msgs", f"{ns}:{dq_name(base)}.msgs", f"{ns}:{xq_name(base)}.msgs"]
    if record.get("group"):
        places.append(f"{ns}:group:{record['group']}:parked.msgs")
    pipe = platform.brokers.of_queue(base).client.pipeline(transaction=False)
    for place in places:
        pipe.hget(place, cur)
    data = next((found for found in pipe.execute() if found is not None), None)
    if data is None:
        return None
    options = Message.decode(data).options
    provider = options.get(PROVIDER) or None
    rule = family.window_for(provider, window_overrides(platform.settings))
    if rule is None:
        return None
    scope = str(options.get(WINDOW_SCOPE) or "*")
    name = (provider or "*").lower()
    return JobWindow(
        provider=name,
        scope=scope,
        key=f"{ns}:window:{family.name}:{name}:{scope}",
        rule=f"{rule.limit} per {rule.period_seconds:g} s",
        reserved=str(options.get(WINDOW_RESERVATION) or ""),
        admitted=str(options.get(WINDOW_ADMITTED) or ""),
    )


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


def tick_rows(platform: Platform, now: datetime | None = None) -> list[TickRow]:
    moment = now or datetime.now(UTC)
    client = platform.broker.client
    notes = {
        as_text(k): json.loads(as_text(v))
        for k, v in client.hgetall(emissions_key(platform)).items()
    }
    rows = []
    for tick in sorted(platform.ticks, key=lambda t: t.name):
        last = previous_fire_time(tick.cron, moment)
        nxt = next_fire_time(tick.cron, moment + timedelta(seconds=1))
        last_slot = tick.slot(last) if last else None
        record = platform.brokers.record(tick.job_id(last_slot)) if last_slot else None
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
