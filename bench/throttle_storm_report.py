"""The report of ``bench.throttle_storm``: the physical limit of a drain, the checks of the
windows' limit on the traced starts, and the Markdown summary (docs/benchmarks.md).

==========================  ===========================================================
target                      met when
==========================  ===========================================================
drain                       drain / physical limit <= :data:`TARGET_RATIO`
throttle failures           no failed attempt names the window, and every start was
                            admitted by a window and none over its limit (each start
                            counted in the window that admitted it)
failures                    no failed attempt, none recorded on a job
one run per request         executions = admitted requests (added + replaced), every
                            document run
==========================  ===========================================================
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from bench.common import log_note, markdown_table, percentile, rnd, verdict

#: Drain / physical limit at or under this meets the target.
TARGET_RATIO = 1.05


def physical_limit(
    due: dict[int, int], limit: int, period: float, sync: float, workers: int, start: float
) -> dict[str, Any]:
    """The drain from ``start`` (epoch seconds) no schedule can beat: the slowest
    organization's windows (its last start at the opening of the last one it needs, plus a
    sync), or the workers."""
    windows = max(math.ceil(n / limit) for n in due.values())
    window_seconds = (math.floor(start / period) + windows - 1) * period + sync - start
    worker_seconds = sum(due.values()) * sync / workers
    return {
        "limit_windows": windows,
        "window_bound_seconds": rnd(window_seconds),
        "worker_bound_seconds": rnd(worker_seconds),
        "limit_seconds": rnd(max(window_seconds, worker_seconds)),
        "bound_by": "windows" if window_seconds >= worker_seconds else "workers",
    }


def window_checks(starts: list[dict[str, Any]], limit: int, period: float) -> dict[str, Any]:
    """Starts over the limit: per window that admitted them (the platform's count) and per
    organization and 1 s of start time (a provider counting on the same clock); how late
    reserved starts began after their window opened."""
    admitted = Counter(e.get("window") for e in starts)
    untagged = admitted.pop(None, 0)
    by_time = Counter((e["org"], math.floor(e["t"] / period)) for e in starts)
    after_open = {
        id(e): e["t"] - int(e["window"].rpartition("#")[2]) * period
        for e in starts
        if e.get("window")
    }
    late = [after_open[id(e)] for e in starts if e.get("reserved") and id(e) in after_open]
    closed = [t - period for t in after_open.values() if t >= period]
    return {
        "starts_without_window": untagged,
        "starts_over_window_limit": sum(max(0, n - limit) for n in admitted.values()),
        "max_starts_in_a_window": max(admitted.values(), default=0),
        "starts_over_limit_by_start_time": sum(max(0, n - limit) for n in by_time.values()),
        "max_starts_in_a_second": max(by_time.values(), default=0),
        "starts_after_their_window_closed": len(closed),
        "starts_after_their_window_closed_max_ms": rnd(max(closed, default=0.0) * 1000, 1),
        "reserved_starts": len(late),
        "reserved_start_late_ms": {
            "p50": rnd(percentile(late, 50) * 1000, 1) if late else None,
            "p95": rnd(percentile(late, 95) * 1000, 1) if late else None,
            "max": rnd(max(late) * 1000, 1) if late else None,
        },
    }


def summary(result: dict[str, Any]) -> str:
    s, t, o = result["settings"], result["targets"], result["enqueue_outcomes"]
    per_org, late = result["organization_drain_seconds"], result["reserved_start_late_ms"]
    bound = (
        f"{result['limit_windows']} windows: {result['limit_seconds']:g} s"
        if result["bound_by"] == "windows"
        else f"{result['limit_seconds']:g} s of workers"
    )
    table = markdown_table(
        ["requests (unique; organizations)", "executions", "failed attempts",
         "throttle failures", "delays", "drain", "physical limit", "drain / limit"],
        [[
            f"{s['requests']:,} ({s['documents']:,}; {s['organizations']})",
            f"**{result['executions']:,}** ({result['documents_executed']:,} documents"
            + (f" + {o['replaced']} re-requested after their sync finished"
               if o.get("replaced") else "")
            + f"; one run per admitted request: "
            f"{verdict(t['one_execution_per_admitted_request'])})",
            f"{result['failed_attempts']} ({verdict(t['failures_met'])})",
            f"{result['throttle_failures']} ({verdict(t['throttle_failures_met'])})",
            f"{result['delays']:,}",
            f"{result['drain_seconds']} s",
            bound,
            f"**{result['drain_over_limit']}** (target <= {t['drain_over_limit_at_most']}: "
            f"{verdict(t['drain_met'])})",
        ]],
    )  # fmt: skip
    notes = [
        f"Physical limit: the larger of the windows' "
        f"({result['limit_windows']} windows for the busiest organization, its last sync "
        f"starting as the last one opens: {result['window_bound_seconds']:g} s) and the "
        f"workers' "
        f"({result['executions']:,} x {s['sync_seconds']} s / "
        f"{s['processes'] * s['threads']} threads = {result['worker_bound_seconds']:g} s): "
        f"bound by the {result['bound_by']}.",
        f"Per organization ({result['executions_per_organization']['min']}-"
        f"{result['executions_per_organization']['max']} executions each): drain "
        f"{per_org['min']}-{per_org['max']} s (median {per_org['median']} s); the first "
        f"sync started {result['first_start_seconds']} s after the workers.",
        f"Enqueue outcomes: {o.get('added', 0):,} added, {o.get('deduplicated', 0):,} "
        f"deduplicated, {o.get('replaced', 0)} replaced (a request after its document's sync "
        f"had finished runs it again by design); "
        f"{result['executions_beyond_admitted_requests']} executions beyond admitted requests.",
        f"Most starts in one window: {result['max_starts_in_a_window']} (starts over the "
        f"limit: {result['starts_over_window_limit']}; by start time, per organization and "
        f"1 s: at most {result['max_starts_in_a_second']}, "
        f"{result['starts_over_limit_by_start_time']} over; "
        f"{result['starts_after_their_window_closed']} starts began after the window that "
        f"admitted them closed, by at most "
        f"{result['starts_after_their_window_closed_max_ms']} ms); "
        f"{result['lapsed_reservations']} lapsed reservations; "
        f"{result['reserved_starts']:,} reserved starts began p50 {late['p50']} / p95 "
        f"{late['p95']} / max {late['max']} ms after their window opened; "
        f"{result['deliveries']:,} deliveries to worker threads = "
        f"{result['fetches_per_execution']} per execution (each delay is one more).",
        f"Window {s['window']} per organization data source; "
        f"{s['sync_seconds']} s syncs; {len(s['batch_sizes'])} enqueue_many batches "
        f"({s['batches_while_running']} sent while running, at "
        f"{', '.join(f'{x:g}' for x in s['batches_sent_after_start_at_s'])} s); "
        f"{s['processes']} worker processes x {s['threads']} threads, "
        f"prefetch {s['prefetch']}, "
        f"poll {s['poll_ms']} ms.",
    ]
    logs = log_note(result["worker_logs"])
    if logs:
        notes.append(logs)
    title = "### Throttle storm" + (f" x{s['scale']}" if s["scale"] != 1 else "")
    return title + "\n\n" + table + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
