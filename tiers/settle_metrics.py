"""A worker's settle sender as metrics: how long Redis takes to answer its runs' starts and
settles, and how many wait for an answer.

=========================================  ====================================================
metric                                     what it is
=========================================  ====================================================
``speedtier_settle_round_trip_seconds``    histogram: a worker process's round trips of
{tier}                                     starts and settles, from the send to the last
                                           reply (the tries of a Redis outage included)
``speedtier_settle_calls_unanswered``      gauge, summed over live processes: starts and
{tier}                                     settles submitted and not answered yet, as each
                                           round trip ends
=========================================  ====================================================

A run's message is acked, and a grouped run's slot passed on, only once its settle is
answered, so a slow settle sender shows as jobs that finished and still hold their place
(the drains' slot cycle: ``docs/benchmarks.md``). The settle sender is the one steady
stream of a busy worker's Redis calls: its round trips are that worker's view of Redis's
latency, without a probe of their own. The worker command reports its tier's
(:func:`round_trip_recorder`, given to ``JobStore.report_settles``).
"""

from __future__ import annotations

from collections.abc import Callable

from shared import metrics

#: Seconds: a round trip of a hundred calls takes a few milliseconds on a healthy Redis; an
#: outage's tries run to seconds.
ROUND_TRIP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)

ROUND_TRIPS = metrics.histogram(
    "settle_round_trip_seconds",
    "A worker process's round trips of run starts and settles, send to last reply.",
    ["tier"],
    buckets=ROUND_TRIP_BUCKETS,
)
UNANSWERED = metrics.gauge(
    "settle_calls_unanswered",
    "Run starts and settles submitted and not answered yet, as each round trip ends.",
    ["tier"],
)


def round_trip_recorder(tier: str) -> Callable[[int, float, int], None]:
    """What a worker of ``tier`` gives its settle sender as ``on_round_trip``: each round
    trip's seconds observed, and the calls left unanswered after it set."""
    seconds_of, unanswered_of = ROUND_TRIPS.labels(tier), UNANSWERED.labels(tier)

    def record(calls: int, seconds: float, unanswered: int) -> None:
        seconds_of.observe(seconds)
        unanswered_of.set(unanswered)

    return record
