"""When an organization's next job in a family will start, from measured rates.

The model (also explained on the page), for one group (family, tier, organization):

* ``r_queue``: runs that ended in the group's queue per minute, all organizations, over the
  last :data:`RATE_MINUTES` minutes (``tiers.run_rates``; over less when the queue began
  working more recently, see :class:`Rates`); the pace at which the queue's ready messages
  drain. ``r_group``: the same for this group alone; the pace at which its slots
  come free.
* The group has a message **waiting** in the queue (admitted under its cap): its next start
  is that message's turn, ``position / r_queue`` from now (``position``: messages fetched
  before it, ``tiers.fair_order.place_from``: the queue's list, then its fair order).
  A waiting message no longer in the queue was prefetched by a worker: it starts when one of
  that worker's threads frees, ``1 / r_queue``.
* Otherwise it has **parked** jobs (every slot taken by a running job): the next parked job
  is admitted when a slot frees, in ``1 / r_group``, and then waits at most behind what the
  queue holds, ``length / r_queue`` (its place in the fair order is its group's virtual
  time: often ahead of much of the queue, never behind more than all of it).
* Nothing waiting or parked: no backlog, nothing to predict.

With no run measured in the window the prediction is unknown (no worker has been taking
from the queue), never a guess. Delayed jobs (retries, window delays) start at their own
due time and are not part of it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import redis

from services.app.dashboard.snapshot import Group
from tiers.fair_order import place_from, place_of

#: The window the rates are measured over.
RATE_MINUTES = 15


@dataclass(frozen=True)
class Prediction:
    """Seconds until the group's next start (None: unknown or nothing to start) and why."""

    seconds: float | None
    basis: str


class Rates:
    """Per-minute rates from the minute counts of ``tiers.run_rates``.

    A field's rate is its runs over the time since its first counted minute in the window
    (at least one minute, at most the window): a queue that began working five minutes ago
    is not diluted over fifteen, and a steady one is averaged over the whole window.

    Parameters:
      minutes: ``(minute, field -> count)``, as ``run_rates.recent_minutes`` answers.
      now: epoch seconds the rates are for.
    """

    def __init__(self, minutes: list[tuple[int, Counter[str]]], now: float) -> None:
        self.now = now
        self.totals: Counter[str] = Counter()
        self.first: dict[str, int] = {}
        for minute, counts in minutes:
            self.totals.update(counts)
            for field in counts:
                self.first.setdefault(field, minute)

    def per_minute(self, field: str) -> float:
        if field not in self.first:
            return 0.0
        elapsed = (self.now - self.first[field] * 60) / 60
        return self.totals[field] / min(max(elapsed, 1.0), RATE_MINUTES + 1.0)


def positions(client: redis.Redis, namespace: str, groups: list[Group]) -> dict[str, int]:
    """Group key -> how many messages are ahead of its first waiting message in the queue."""
    asked = [(g, rid) for g in groups for rid in g.waiting_ids]
    if not asked:
        return {}
    pipe = client.pipeline(transaction=False)
    for group, redis_id in asked:
        place_of(pipe, namespace, group.queue, redis_id)
    replies = iter(pipe.execute())
    found: dict[str, int] = {}
    for group, _ in asked:
        position = place_from(replies)
        if position is not None:
            found[group.key] = min(found.get(group.key, position), int(position))
    return found


def predict(group: Group, rates: Rates, position: int | None, queue_length: int) -> Prediction:
    """The next start of ``group`` under the model in this module's docstring."""
    r_queue = rates.per_minute(f"q:{group.queue}")
    r_group = rates.per_minute(f"g:{group.key}")
    if group.waiting and position is not None:
        if r_queue <= 0:
            if position == 0:
                return Prediction(None, "first in its queue, but no run ended there lately")
            return Prediction(None, f"{position} ahead in the queue; no run ended there lately")
        if position == 0:
            return Prediction(0.0, "first in its queue: starts when a worker thread is free")
        return Prediction(
            60 * position / r_queue, f"{position} ahead in the queue at {r_queue:.1f} runs/min"
        )
    if group.waiting:
        # Its waiting messages have left the list: a worker prefetched them, and starts one
        # when one of its threads frees (one run ending, at the queue's pace).
        if r_queue <= 0:
            return Prediction(None, "prefetched by a worker; no run ended there lately")
        return Prediction(60 / r_queue, f"prefetched by a worker; runs end at {r_queue:.1f}/min")
    if group.parked:
        if r_group <= 0 or r_queue <= 0:
            return Prediction(None, "group full; none of its runs ended lately")
        seconds = 60 / r_group + 60 * queue_length / r_queue
        return Prediction(
            seconds,
            f"group full: a slot frees every {60 / r_group:.0f}s ({r_group:.1f} runs/min), "
            f"then {queue_length} ahead at {r_queue:.1f} runs/min",
        )
    return Prediction(None, "no backlog")
