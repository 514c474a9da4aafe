"""Where a worker's memory goes while it ingests one large file: the same
``pipeline.ingest_document`` call a worker makes, measured two ways.

1. :func:`step_peaks`, in a fresh spawned process without tracing: the peak resident set
   (VmHWM, reset through ``/proc/self/clear_refs`` after each step) of each step, so native
   memory (libpq, the Rust splitter, allocator arenas) counts too.
2. :func:`profile`, in this process under tracemalloc: snapshots after embedding and just
   just before the chunk set is written (SQLAlchemy's ``before_cursor_execute`` of the
   DELETE of the old chunks, which the COPY of the new ones follows), which is where
   everything a pass builds is alive at once.
   Live memory is attributed to the innermost frame of this repository that allocated it
   (the code that made the copy) and to the innermost frame overall (where, in a library,
   the allocation happened). Python allocations only; tracing inflates the process's RSS.

Steps: extraction, splitting, embedding (in batches), the version row, and the chunks'
COPY with the commit.
"""

from __future__ import annotations

import os
import queue
import time
import tracemalloc
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.common import markdown_table, read_status_kib, rnd, verdict
from bench.ingestion_stack import (
    SETTLE_TIMEOUT,
    Stack,
    knowledge_bases,
    outcome,
    submit,
    wait_settled,
    workers,
)

REPO = str(Path(__file__).resolve().parent.parent)
FRAMES = 25
TOP = 12
ORGANIZATION = 301
MEMORY_TARGET_MB = 300
#: Snapshot before the chunks are written: every vector is made.
SNAPSHOT_STEPS = ("version row, before the chunk COPY",)


def _where(frame: tracemalloc.Frame) -> str:
    name = frame.filename
    if "site-packages/" in name:
        name = name.split("site-packages/", 1)[1]
    elif name.startswith(REPO):
        name = name[len(REPO) + 1 :]
    elif "/lib/python3" in name:
        name = "stdlib/" + name.split("/lib/python3", 1)[1].split("/", 1)[1]
    return f"{name}:{frame.lineno}"


def _ours(frame: tracemalloc.Frame) -> bool:
    name = frame.filename
    return name.startswith(REPO) and not any(p in name for p in ("/bench/", "site-packages"))


def attribute(snapshot: tracemalloc.Snapshot) -> list[dict[str, Any]]:
    """Live bytes by (innermost repository frame, innermost frame), largest first."""
    sizes: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for stat in snapshot.statistics("traceback"):
        frames = list(stat.traceback)  # most recent call last
        ours = next((f for f in reversed(frames) if _ours(f)), None)
        key = (_where(ours) if ours else "-", _where(frames[-1]))
        sizes[key][0] += stat.size
        sizes[key][1] += stat.count
    ranked = sorted(sizes.items(), key=lambda kv: -kv[1][0])[:TOP]
    return [
        {"our_code": ours, "allocated_in": inner, "mib": rnd(size / 2**20, 1), "blocks": count}
        for (ours, inner), (size, count) in ranked
    ]


class Checkpoints:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def take(self, step: str, *, snapshot: bool) -> None:
        current, peak = tracemalloc.get_traced_memory()
        values = {
            "traced_mib": rnd(current / 2**20, 1),
            "traced_peak_mib": rnd(peak / 2**20, 1),
            "process_rss_mib": rnd((read_status_kib(os.getpid(), "VmRSS") or 0) / 1024, 1),
        }
        last = self.rows[-1] if self.rows else None
        if last is not None and last["step"] == step:
            last.update(values)  # the next batch of the same step: its latest figures
            last["times"] += 1
            return
        row: dict[str, Any] = {"step": step, **values, "times": 1}
        if snapshot:
            started = time.perf_counter()
            row["top"] = attribute(tracemalloc.take_snapshot())
            row["snapshot_seconds"] = rnd(time.perf_counter() - started, 1)
        self.rows.append(row)


# -- the worker's peak ----------------------------------------------------------------------------


def measure_memory(env: Stack, settings: dict[str, Any], say: Any) -> dict[str, Any]:
    from bench.ingestion_corpus import Document, big_text

    size = settings["memory_bytes"]
    data = big_text(size)
    doc = Document("big", "text", data, len(data))
    bases = knowledge_bases(env, [300])
    with workers(env, 1, 1, "memory") as pool:
        (pid,) = (p.pid for p in pool.processes)
        assert pid is not None
        before = _memory(pid)
        pool.go()
        time.sleep(1.0)
        started = time.monotonic()
        ids = submit(env, [(300, doc)], bases)
        wait_settled(env, ids, SETTLE_TIMEOUT, interval=0.5)
        seconds = time.monotonic() - started
        after = _memory(pid)
    result = outcome(env, ids, [300])
    say(f"memory: 10 MiB file ingested in {seconds:.1f} s, VmHWM {after['peak_rss_mib']} MiB")
    peak_mb = after["peak_rss_mib"] * 1.048576
    return {
        "file_bytes": size,
        "kind": "text/plain",
        "seconds": rnd(seconds, 1),
        **result,
        "worker_before": before,
        "worker_after": after,
        "peak_mb": rnd(peak_mb, 1),
        "growth_mib": rnd(after["peak_rss_mib"] - before["peak_rss_mib"], 1),
    }


def _memory(pid: int) -> dict[str, float]:
    hwm, rss = read_status_kib(pid, "VmHWM"), read_status_kib(pid, "VmRSS")
    return {"peak_rss_mib": rnd((hwm or 0) / 1024, 1), "rss_mib": rnd((rss or 0) / 1024, 1)}


def summary_lines(m: dict[str, Any]) -> list[str]:
    met = m["peak_mb"] < MEMORY_TARGET_MB
    lines = [
        f"**Peak memory**: a worker process ingesting one {m['file_bytes'] / 2**20:.0f} MiB "
        f"text file ({m['chunks']:,} chunks) in {m['seconds']} s: VmHWM "
        f"{m['worker_before']['peak_rss_mib']} MiB before, {m['worker_after']['peak_rss_mib']} "
        f"MiB after ({m['peak_mb']} MB; target under {MEMORY_TARGET_MB} MB: {verdict(met)}).",
    ]
    if "profile" in m:
        lines += ["", *profile_lines(m["profile"])]
    return lines


# -- 1. peak RSS per step, in a fresh process ---------------------------------------------------


def _kib(field: str) -> int:
    return read_status_kib(os.getpid(), field) or 0


class StepPeaks:
    """Peak RSS during each step: VmHWM read at the step's end, then reset to the RSS."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.reset()

    def reset(self) -> None:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # resets VmHWM to the current RSS (Linux 4.0+)

    def take(self, step: str) -> None:
        peak, rss = rnd(_kib("VmHWM") / 1024, 1), rnd(_kib("VmRSS") / 1024, 1)
        last = self.rows[-1] if self.rows else None
        if last is not None and last["step"] == step:
            # A step done in batches (embedding) is one row: its highest peak.
            last.update(peak_rss_mib=max(last["peak_rss_mib"], peak), rss_mib=rss)
            last["times"] += 1
        else:
            self.rows.append({"step": step, "peak_rss_mib": peak, "rss_mib": rss, "times": 1})
        self.reset()


def _instrument(env_engine: Any, chunker: Any, embedder: Any, on_step: Any) -> Any:
    """Call ``on_step(name)`` at the end of each step of an ingestion pass; returns an undo."""
    from sqlalchemy import event

    from services.indexing import extract as extract_module

    split, embed, extract = chunker.split, embedder.embed, extract_module.extract

    def extract_step(*args: Any, **kwargs: Any) -> Any:
        result = extract(*args, **kwargs)
        on_step("extract")
        return result

    def split_step(text: str) -> Any:
        result = split(text)
        on_step("split")
        return result

    def embed_step(texts: Any) -> Any:
        result = embed(texts)
        on_step("embed")
        return result

    def before_write(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE FROM API2.KB_CHUNKS"):
            on_step(SNAPSHOT_STEPS[0])

    chunker.split = split_step
    embedder.embed = embed_step
    extract_module.extract = extract_step
    event.listen(env_engine, "before_cursor_execute", before_write)

    def undo() -> None:
        event.remove(env_engine, "before_cursor_execute", before_write)
        extract_module.extract = extract

    return undo


def step_peaks_main(values: dict[str, Any], organization: int, document_id: int, out: Any) -> None:
    """The spawned process: the worker's platform, one ingestion pass, peaks per step."""
    from services.app.bootstrap import bootstrap
    from services.indexing.chunking import Chunker
    from services.indexing.embedders import embedder_from_settings
    from services.ingestion import pipeline
    from shared.config import load_settings
    from shared.db.base import utcnow
    from shared.db.engine import session_scope

    platform = bootstrap(load_settings(**values), component="bench-ingestion-memory")
    chunker, embedder = Chunker(), embedder_from_settings(platform.settings)
    peaks = StepPeaks()
    peaks.take("start (platform built)")
    _instrument(platform.engine, chunker, embedder, peaks.take)
    with session_scope(platform.sessions) as session:
        pipeline.ingest_document(
            session,
            organization_id=organization,
            document_id=document_id,
            chunker=chunker,
            embedder=embedder,
            now=utcnow(),
        )
        session.commit()
    peaks.take("chunk COPY and commit")
    out.put(peaks.rows)
    platform.close()


def step_peaks(env: Stack, size: int) -> list[dict[str, Any]]:
    """Peak RSS per step of ingesting one ``size``-byte text file, in a fresh process."""
    import multiprocessing

    from bench.ingestion_corpus import Document, big_text

    organization = ORGANIZATION + 1
    bases = knowledge_bases(env, [organization])
    document = Document("big", "text", big_text(size), size)
    (doc_id,) = submit(env, [(organization, document)], bases, enqueue=False)
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    child = context.Process(
        target=step_peaks_main, args=(env.values, organization, doc_id, out), daemon=True
    )
    child.start()
    try:
        deadline = time.monotonic() + 1800
        while True:
            try:
                rows: list[dict[str, Any]] = out.get(timeout=1.0)
                break
            except queue.Empty:
                if not child.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"the memory probe ended early ({child.exitcode})") from None
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
    return rows


# -- 2. tracemalloc ------------------------------------------------------------------------------


def profile(env: Stack, size: int, *, trace: bool = True) -> dict[str, Any]:
    """The per-step peaks of a fresh process ingesting one ``size``-byte text file, then,
    with ``trace``, the same ingestion in this process under tracemalloc (slow: about 15
    minutes for 10 MiB on two cores)."""
    from bench.ingestion_corpus import Document, big_text
    from services.indexing.chunking import Chunker
    from services.indexing.embedders import embedder_from_settings
    from services.ingestion import pipeline
    from shared.db.base import utcnow
    from shared.db.engine import session_scope

    peaks = step_peaks(env, size)
    if not trace:
        return {"step_peaks": peaks}
    data = big_text(size)
    bases = knowledge_bases(env, [ORGANIZATION])
    (doc_id,) = submit(
        env, [(ORGANIZATION, Document("big", "text", data, size))], bases, enqueue=False
    )
    del data
    chunker, embedder = Chunker(), embedder_from_settings(env.platform.settings)
    checkpoints = Checkpoints()
    undo = _instrument(
        env.platform.engine,
        chunker,
        embedder,
        lambda step: checkpoints.take(step, snapshot=step in SNAPSHOT_STEPS),
    )
    tracemalloc.start(FRAMES)
    try:
        checkpoints.take("start", snapshot=False)
        with session_scope(env.platform.sessions) as session:
            outcome = pipeline.ingest_document(
                session,
                organization_id=ORGANIZATION,
                document_id=doc_id,
                chunker=chunker,
                embedder=embedder,
                now=utcnow(),
            )
            session.commit()
        checkpoints.take("chunk COPY and commit", snapshot=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        undo()
    return {
        "step_peaks": peaks,
        "chunks": outcome.chunk_count,
        "traced_peak_mib": rnd(peak / 2**20, 1),
        "checkpoints": checkpoints.rows,
    }


def profile_lines(result: dict[str, Any]) -> list[str]:
    peak_rows = [
        [r["step"], r.get("times", 1), r["peak_rss_mib"], r["rss_mib"]]
        for r in result["step_peaks"]
    ]
    lines = [
        "Peak RSS of each step in a fresh process (no tracing; native memory included), MiB"
        " (embedding runs in batches: one row, its highest peak):",
        "",
        markdown_table(["step", "batches", "peak RSS in the step", "RSS at its end"], peak_rows),
        "",
    ]
    if "checkpoints" not in result:
        return [
            *lines,
            "Which code holds the memory: `python -m bench.ingestion --only memory "
            "--profile-memory` replays the ingestion under tracemalloc.",
        ]
    rows = [
        [r["step"], r.get("times", 1), r["traced_mib"], r["traced_peak_mib"], r["process_rss_mib"]]
        for r in result["checkpoints"]
    ]
    lines += [
        f"tracemalloc replay in one process ({result['chunks']:,} chunks; traced peak "
        f"{result['traced_peak_mib']} MiB, Python allocations only):",
        "",
        markdown_table(["step", "batches", "live MiB", "peak MiB so far", "process RSS MiB"], rows),
    ]
    for row in result["checkpoints"]:
        if "top" in row:
            lines += ["", f"Live at **{row['step']}**, by the code that allocated it:", ""]
            lines.append(
                markdown_table(
                    ["our code", "allocated in", "MiB", "blocks"],
                    [[t["our_code"], t["allocated_in"], t["mib"], t["blocks"]] for t in row["top"]],
                )
            )
    return lines
