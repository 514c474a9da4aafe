"""The report of ``bench.bullmq_compare``: its result as Markdown tables (docs/benchmarks.md)."""

from __future__ import annotations

from typing import Any

from bench.common import markdown_table

MEASURES = (
    "single_enqueue",
    "bulk_enqueue",
    "drain",
    "drain_grouped",
)


def _round_ranges(result: dict[str, Any]) -> list[str]:
    ranges = result.get("round_ratio_ranges")
    if not ranges:
        return []
    (low, high), (g_low, g_high) = ranges["drain"], ranges["grouped_to_ungrouped"]
    return [
        "",
        f"Each round's own ratio, lowest to highest: ungrouped drain / BullMQ {low} to {high}, "
        f"grouped / ungrouped {g_low} to {g_high}.",
    ]


def _cpu_bound(ratios: dict[str, Any]) -> list[str]:
    if "grouped_cpu_bound" not in ratios:
        return []
    return [
        "",
        f"By CPU (workers' and Redis's, per job, medians): an ungrouped job costs "
        f"{ratios['grouped_cpu_bound']}x a grouped one, which is the grouped / ungrouped "
        "ratio if both drains kept the same cores busy; they kept "
        f"{ratios['drain_cores_busy']} (ungrouped) and {ratios['drain_grouped_cores_busy']} "
        "(grouped) of the machine's cores busy with workers and Redis.",
    ]


def summary(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"### speedtier beside BullMQ\n\nSkipped: {result['skipped']}."
    medians, ratios = result["medians"], result["ratios"]
    labels = {
        "single_enqueue": "enqueue one by one",
        "bulk_enqueue": "bulk enqueue (addBulk / enqueue_many)",
        "drain": "drain, no group cap",
        "drain_grouped": "drain, cap 5 per organization, 20 organizations (BullMQ: no cap)",
    }
    rows = [
        [labels[m], f"{medians['bullmq'][m]:,}", f"{medians['speedtier'][m]:,}", ratios[m]]
        for m in MEASURES
        if m in medians["speedtier"]
    ]
    settings = result["settings"]
    return "\n".join(
        [
            "### speedtier beside BullMQ",
            "",
            f"{settings['jobs']:,} no-op jobs, median of {settings['rounds']} alternating "
            f"rounds, BullMQ {result['bullmq_version']} (one Worker, concurrency 50), speedtier "
            f"{settings['processes']} processes x {settings['threads']} threads; jobs/s. "
            f"Load average at each measure: {result['load_averages']}.",
            "",
            markdown_table(["measure", "BullMQ", "speedtier", "speedtier / BullMQ"], rows),
            "",
            f"Grouped drain / ungrouped drain: {ratios['grouped_to_ungrouped']} (target >= 0.8).",
            *_cpu_bound(ratios),
            *_round_ranges(result),
            *(
                [
                    "",
                    f"Raw Dramatiq's `send` one by one: {result['raw_dramatiq_send']:,}/s; "
                    f"`Router.enqueue` / raw send: {ratios['single_to_raw_send']} "
                    "(target >= 1.0).",
                ]
                if "raw_dramatiq_send" in result
                else []
            ),
            "",
            "speedtier's drain, per job (median; Redis figures are server-wide):",
            "",
            markdown_table(
                [
                    "drain",
                    "worker CPU µs",
                    "Redis CPU µs",
                    "Redis commands",
                    "script calls",
                    "run ms (mean)",
                    "slot cycle ms",
                    "slot cycle outside the run ms",
                ],
                [
                    [
                        labels[m],
                        c["worker_cpu_us"],
                        c["redis_cpu_us"],
                        c["commands"],
                        c["script_calls"],
                        c.get("run_ms_mean", "-"),
                        c.get("slot_cycle_ms", "-"),
                        c.get("outside_run_ms", "-"),
                    ]
                    for m, c in result["drain_costs_per_job"].items()
                ],
            ),
            "",
            "Run: from the run's start to its settle's making (job records). A group slot's "
            "cycle is slots / jobs per second; outside the run: the fair order, the fetch, "
            "the worker's buffer and the settle's trip: means (`bench.job_timing`).",
        ]
    )
