"""Redis time of a drain's scripts per job: this tree's Lua scripts against another
revision's, measured together (``python -m bench.script_ab --base <rev>``).

On a shared machine whose speed moves by 2x within minutes, two drains run one after the
other cannot resolve a change of a tenth in Redis's work per job. Here one driver process
drains two namespaces side by side: one driven by this tree's scripts (``tiers/lua``), the
other by the scripts ``git show <rev>:tiers/lua/...`` gives, through the same Python client
(``JobStore``, so both revisions must take the same script arguments: the run stops on a
script error). It enqueues the same jobs into both, then alternates batches of 50: fetch and
claim a batch (``fetch_claim.lua``), settle each job (``settle.lua``, acking its delivery),
wait for the settles' answers. Redis's slowlog, at threshold 0 for the run, gives each
script call's duration; the calls are attributed by script and by namespace (the script's
first key).

The side that goes second in each round comes out about a tenth cheaper with the same
scripts on both sides (measured: 68.5 against 62.9 and 58.6 against 52.2 µs a job), so each
pairing runs in both orders and the ratio reported is the geometric mean of the two orders'
ratios, in which that bias cancels.

The slowlog settings of the server are restored afterwards; other clients' commands logged
meanwhile are ignored. Results: ``bench/results/script_ab.json``.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

from tiers.lua_scripts import PRELUDES

ROOT = Path(__file__).resolve().parent.parent
BATCH = 50
KINDS = {"grouped": ("bench_grouped", 20), "plain": ("bench_noop", 1)}
#: Scripts a drain calls (start.lua only with ``--starts``); enqueue's time is not counted.
DRAIN_SCRIPTS = ("fetch_claim", "settle", "start")


def revision_source(revision: str, name: str) -> str:
    """The identity script ``name`` as revision ``revision`` loads it: its preludes' helpers
    linked in front of the body by that revision's own ``tiers.lua_scripts.link``, or, in
    revisions without one, the preludes it has (older ones had only ``_prelude.lua``) whole."""

    def show(path: str) -> str | None:
        shown = subprocess.run(
            ["git", "show", f"{revision}:{path}"], cwd=ROOT, capture_output=True, text=True
        )
        return shown.stdout if shown.returncode == 0 else None

    loader: dict[str, Any] = {"__name__": "revision_lua_scripts"}
    # This repository's own loader, as that revision had it.
    exec(show("tiers/lua_scripts.py") or "", loader)
    names = loader.get("PRELUDES", PRELUDES)
    preludes = [text for part in names if (text := show(f"tiers/lua/{part}")) is not None]
    body = show(f"tiers/lua/{name}.lua") or ""
    if "link" in loader:
        return str(loader["link"](preludes, body))
    return "\n".join([*preludes, body])


def side(redis_url: str, label: str, revision: str | None, kind: str, jobs: int) -> Any:
    """A namespace holding ``jobs`` of ``kind`` and a broker to drain them, its scripts those of
    ``revision`` (None: this tree's): the namespace, the broker, the queue, and the scripts'
    names by SHA."""
    from bench.bullmq_compare import _requests
    from bench.common import new_namespace
    from bench.families import make_broker, make_router

    family_kind, organizations = KINDS[kind]
    namespace = new_namespace(f"script-ab-{label}")
    broker, families = make_broker(redis_url, namespace, name=f"script-ab-{label}")
    # the job store's own table (a dict): swapped in place
    scripts = cast(dict[str, Any], broker.jobs._scripts)
    if revision is not None:
        for name in list(scripts):
            scripts[name] = broker.client.register_script(revision_source(revision, name))
    make_router(broker, families).enqueue_many(_requests(family_kind, jobs, organizations))
    family = next(f for f in families.values() if f.kind == family_kind)
    names = {script.sha: name for name, script in scripts.items()}
    return namespace, broker, family.queues()[0], names


def drain_batch(broker: Any, queue: str, *, starts: bool = False) -> int:
    """Fetch and claim up to BATCH messages of ``queue``, settle each (acking it) as a no-op
    run's outcome, and wait for the answers; with ``starts``, each message's ``start.lua``
    goes ahead of its settle on the settle sender, as a worker's run sends it. Returns how
    many were fetched; raises when a start or settle failed or did not let its run through."""
    from dramatiq.message import Message

    from tiers.middleware.deliveries import DEFAULT_MAX_UNSETTLED

    jobs = broker.jobs
    fetched = jobs.fetch_and_claim(queue, broker.broker_id, BATCH, list(broker.actors)).data
    errors: list[Exception] = []

    def answered(reply: Any, error: Exception | None) -> None:
        if error is not None:
            errors.append(error)
        elif isinstance(reply, tuple) and reply[0] != "run":
            errors.append(RuntimeError(f"start answered {reply}"))
        elif not isinstance(reply, tuple) and reply not in ("ok", "released"):
            errors.append(RuntimeError(f"settle answered {reply}"))

    for index, data in enumerate(fetched):
        message = Message.decode(data)
        epoch = ""
        if starts:
            start_id = f"drain-{time.monotonic_ns()}-{index}"
            jobs.start_later(
                message,
                queue,
                broker.broker_id,
                max_unsettled=DEFAULT_MAX_UNSETTLED,
                retention_seconds=600,
                start_id=start_id,
                then=answered,
            )
            epoch = f"s:{start_id}"
        args = jobs.settle_args(
            message,
            state="completed",
            retention_seconds=600,
            ack=(queue, broker.broker_id),
            epoch=epoch,
        )
        jobs.settle_later(args, answered)
    jobs.flush_settles(60)
    if errors:
        raise RuntimeError(f"a start or settle failed: {errors[0]}")
    return len(fetched)


def pairing(
    redis_url: str,
    kind: str,
    jobs: int,
    first: str | None,
    second: str | None,
    starts: bool = False,
) -> dict[str, float]:
    """µs of drain-script time per job for each side (``None``: this tree; else a revision);
    with ``starts``, each run's ``start.lua`` is sent and counted too."""
    from bench.common import connect, delete_namespace

    client = connect(redis_url, name="script-ab")
    sides = [side(redis_url, "a", first, kind, jobs), side(redis_url, "b", second, kind, jobs)]
    side_of = {namespace: index for index, (namespace, *_rest) in enumerate(sides)}
    saved = client.config_get("slowlog-*")
    totals = [0.0, 0.0]
    done = [0, 0]
    try:
        client.config_set("slowlog-max-len", 100_000)
        client.config_set("slowlog-log-slower-than", 0)
        client.slowlog_reset()
        while min(done) < jobs:
            for index, (_namespace, broker, queue, _names) in enumerate(sides):
                if done[index] < jobs:
                    done[index] += drain_batch(broker, queue, starts=starts)
            for entry in client.slowlog_get(100_000):
                words = entry["command"].split()
                if len(words) < 4 or words[0].lower() not in (b"evalsha", "evalsha"):
                    continue
                sha, key = (w.decode() if isinstance(w, bytes) else w for w in (words[1], words[3]))
                owner = side_of.get(key)
                if owner is not None and sides[owner][3].get(sha) in DRAIN_SCRIPTS:
                    totals[owner] += entry["duration"]
            client.slowlog_reset()
    finally:
        for setting, value in saved.items():
            client.config_set(str(setting), str(value))
        for namespace, broker, _queue, _names in sides:
            delete_namespace(client, namespace)
            broker.close()
        client.close()
    return {"first_us": totals[0] / jobs, "second_us": totals[1] / jobs}


def run(
    *, base: str, kind: str, jobs: int, rounds: int, redis_url: str, starts: bool = False
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for _ in range(rounds):
        for first, second in ((base, None), (None, base)):
            measured = pairing(redis_url, kind, jobs, first, second, starts)
            before = measured["first_us"] if first == base else measured["second_us"]
            after = measured["second_us"] if first == base else measured["first_us"]
            rows.append(
                {
                    "order": "base first" if first == base else "this tree first",
                    "base_us": round(before, 2),
                    "this_us": round(after, 2),
                    "this_over_base": round(after / before, 3),
                }
            )
            print(f"<!-- {rows[-1]} -->", file=sys.stderr)
    means = [
        round(math.sqrt(rows[i]["this_over_base"] * rows[i + 1]["this_over_base"]), 3)
        for i in range(0, len(rows) - 1, 2)
    ]
    return {
        "base": base,
        "kind": kind,
        "jobs": jobs,
        "starts": starts,
        "pairings": rows,
        "ratio_by_round": means,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.script_ab", description=__doc__)
    parser.add_argument("--base", required=True, help="the git revision to compare with")
    parser.add_argument("--kind", choices=sorted(KINDS), default="grouped")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per side (default 10,000)")
    parser.add_argument("--rounds", type=int, default=2, help="pairings in each order (default 2)")
    parser.add_argument(
        "--starts", action="store_true", help="send and count each run's start.lua as well"
    )
    parser.add_argument("--redis-url", help="Redis to use (default: BENCH_REDIS_URL or db 14)")
    options = parser.parse_args(argv)

    from bench.common import REDIS_URL, write_result

    result = run(
        base=options.base,
        kind=options.kind,
        jobs=options.jobs,
        rounds=options.rounds,
        redis_url=options.redis_url or REDIS_URL,
        starts=options.starts,
    )
    scripts = "fetch, start and settle" if options.starts else "fetch and settle"
    print(f"### Drain scripts' Redis time per job: this tree against {options.base}\n")
    print(
        f"{options.jobs:,} {options.kind} jobs a side ({scripts}), slowlog per call, "
        f"batches of {BATCH}.\n"
    )
    print("| order | base µs a job | this tree µs a job | this / base |")
    print("|---|---:|---:|---:|")
    for row in result["pairings"]:
        print(f"| {row['order']} | {row['base_us']} | {row['this_us']} | {row['this_over_base']} |")
    means = ", ".join(str(m) for m in result["ratio_by_round"])
    print(f"\nGeometric mean of the two orders, per round: **{means}**.\n")
    print(f"_Results in {write_result('script_ab', result)}._")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
