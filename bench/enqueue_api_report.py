"""The targets and the report of ``bench.enqueue_api``: its steps as a Markdown table
(docs/benchmarks.md) and each target's verdict, computed from the measured steps.

=====================  ==============================================================
target                 met when, over the API's single-request steps without errors
=====================  ==============================================================
rate within p99        some step reaches :data:`TARGET_RPS` with p99 <= :data:`TARGET_P99_MS`
tail                   p99 <= :data:`TAIL_RATIO` x p50 at every concurrency from 1 to
                       :data:`TAIL_UP_TO`
no drop                the rate at the highest concurrency above :data:`NO_DROP_FROM` (up
                       to :data:`TAIL_UP_TO`) is at least the rate at :data:`NO_DROP_FROM`
                       (the median of the rounds' ratios, with ``--rounds``)
=====================  ==============================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median
from typing import Any

from bench.common import markdown_table
from bench.http_load import PATH

TARGET_RPS, TARGET_P99_MS = 2_000, 20.0
#: The slowest 1% of requests may take this many times the median, at every concurrency
#: from 1 to :data:`TAIL_UP_TO`.
TAIL_RATIO, TAIL_UP_TO = 5.0, 32
#: Adding clients beyond this many must not lower the rate.
NO_DROP_FROM = 8


def _singles(steps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        s for s in steps if s["server"] == "api" and s["body_requests"] == 1 and not s["non_202"]
    ]


def targets(steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each target of the module docstring with its figures and ``<name>_met``."""
    singles = _singles(steps)
    within = [s for s in singles if s["p99_ms"] <= TARGET_P99_MS]
    best = max(within, key=lambda s: s["requests_per_second"], default=None)
    tail = [
        {
            "concurrency": s["concurrency"],
            "p50_ms": s["p50_ms"],
            "p99_ms": s["p99_ms"],
            "p99_over_p50": round(s["p99_ms"] / s["p50_ms"], 2) if s["p50_ms"] else None,
        }
        for s in singles
        if s["concurrency"] <= TAIL_UP_TO
    ]
    no_drop = _no_drop(singles)
    return {
        "best_single_within_p99": best,
        "single_rps": TARGET_RPS,
        "single_p99_ms": TARGET_P99_MS,
        "single_met": best is not None and best["requests_per_second"] >= TARGET_RPS,
        "tail_ratio": TAIL_RATIO,
        "tail": tail,
        "tail_met": bool(tail)
        and all(t["p99_over_p50"] is not None and t["p99_over_p50"] <= TAIL_RATIO for t in tail),
        "no_drop": no_drop,
        "no_drop_met": no_drop is not None and no_drop["ratio"] >= 1.0,
    }


def _no_drop(singles: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The rate at the highest concurrency above :data:`NO_DROP_FROM` (up to
    :data:`TAIL_UP_TO`) over the rate at :data:`NO_DROP_FROM`, per round that measured both
    (``round``, 1 when absent), and their median (``ratio``); None when no round did."""
    by_round: dict[int, dict[int, float]] = {}
    for s in singles:
        by_round.setdefault(s.get("round", 1), {})[s["concurrency"]] = s["requests_per_second"]
    tops = [c for rates in by_round.values() for c in rates if NO_DROP_FROM < c <= TAIL_UP_TO]
    if not tops:
        return None
    top = max(tops)
    ratios = [
        round(rates[top] / rates[NO_DROP_FROM], 3)
        for _round, rates in sorted(by_round.items())
        if rates.get(NO_DROP_FROM) and top in rates
    ]
    if not ratios:
        return None
    return {"from": NO_DROP_FROM, "to": top, "ratio": median(ratios), "rounds": ratios}


def _ratio(step: dict[str, Any], steps: Sequence[dict[str, Any]]) -> str:
    if step["server"] != "api" or step["body_requests"] != 1:
        return ""
    for other in steps:
        if other["server"] == "ceiling" and other["concurrency"] == step["concurrency"]:
            return f"{step['requests_per_second'] / other['requests_per_second']:.2f}"
    return ""


def _spread(step: dict[str, Any]) -> str:
    spread = step.get("connections_per_worker")
    return " / ".join(str(n) for n in spread) if spread else ""


def _verdicts(found: dict[str, Any]) -> list[str]:
    best = found["best_single_within_p99"]
    rate = (
        f"Best single-request rate with p99 <= {TARGET_P99_MS:.0f} ms: "
        f"**{best['requests_per_second']:,.0f} requests/s** at concurrency "
        f"{best['concurrency']} (p99 {best['p99_ms']} ms; target >= {TARGET_RPS:,}): "
        if best
        else f"No single-request step kept p99 <= {TARGET_P99_MS:.0f} ms: "
    ) + ("met." if found["single_met"] else "missed.")
    ratios = ", ".join(
        f"{t['p99_over_p50']}x at {t['concurrency']}" for t in found["tail"] if t["p99_over_p50"]
    )
    tail = (
        f"Tail, p99 / p50 (target <= {TAIL_RATIO:g}x at 1 to {TAIL_UP_TO} clients): "
        f"{ratios or 'no step'}: " + ("**met**." if found["tail_met"] else "**missed**.")
    )
    no_drop = found["no_drop"]
    rounds = (
        f" (median of {len(no_drop['rounds'])} rounds: "
        + ", ".join(str(r) for r in no_drop["rounds"])
        + ")"
        if no_drop and len(no_drop["rounds"]) > 1
        else ""
    )
    drop = (
        f"Rate at {no_drop['to']} clients / at {no_drop['from']}: {no_drop['ratio']}{rounds} "
        f"(target >= 1): " + ("**met**." if found["no_drop_met"] else "**missed**.")
        if no_drop
        else f"No drop from {NO_DROP_FROM} clients: not measured (no such steps)."
    )
    return [rate, "", tail, "", drop]


def summary(result: dict[str, Any]) -> str:
    steps = result["steps"]
    rows: list[Sequence[Any]] = [
        [
            s.get("round", 1),
            s["server"],
            s["body_requests"],
            s["concurrency"],
            f"{s['requests_per_second']:,.0f}",
            f"{s['jobs_per_second']:,.0f}",
            s["p50_ms"],
            s["p99_ms"],
            sum(s["non_202"].values()),
            _spread(s),
            f"{s['client_cores']} / {s['server_cores']} / {s['redis_cores']}",
            s["server_cpu_ms_per_request"],
            _ratio(s, steps),
            s["load_average_1m"],
        ]
        for s in steps
    ]
    settings = result["settings"]
    log = "on" if settings["access_log"] else "off"
    percentiles = (
        "p50/p99 as wrk reports them (with its coordinated-omission correction: a stall of "
        "S ms on a connection that sends every I ms counts as S/I requests)"
        if settings["load"] == "wrk"
        else "p50/p99 of the requests sent"
    )
    return "\n".join(
        [
            "### Enqueue API",
            "",
            f"`POST {PATH}` on `speedtier api` ({settings['workers']} gunicorn workers x "
            f"{settings['threads']} threads, access log {log}) and on the ceiling (a bare Flask "
            f"202 under the same gunicorn), {settings['load']} closed-loop clients, same machine; "
            f"{percentiles}; connections per worker sampled mid-step.",
            "",
            markdown_table(
                [
                    "round",
                    "server",
                    "requests per body",
                    "concurrency",
                    "requests/s",
                    "jobs/s",
                    "p50 ms",
                    "p99 ms",
                    "non-202",
                    "connections per worker",
                    "CPU cores client / server / Redis",
                    "server CPU ms per request",
                    "of ceiling",
                    "load avg 1m",
                ],
                rows,
            ),
            "",
            *_verdicts(result["targets"]),
        ]
    )
