"""testkit.thread_counts: the per-thread counters it reads and the window it divides by."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from testkit import thread_counts as thread_split


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class _Named(threading.Thread):
    pass


def test_a_threads_counters_grow_with_its_own_cpu() -> None:
    before = thread_split.thread_counters(threading.get_native_id())
    assert before is not None
    _spin(0.2)
    after = thread_split.thread_counters(threading.get_native_id())
    assert after is not None
    # 0.2 s of this thread's CPU is at least 10 clock ticks of 10 ms (user and system).
    assert (after[0] + after[1]) - (before[0] + before[1]) >= 10
    assert after[2] >= before[2] and after[3] >= before[3]


def test_an_ended_thread_has_no_counters() -> None:
    thread = threading.Thread(target=lambda: None)
    thread.start()
    thread.join()
    assert thread.native_id is not None
    # join() returns once Python is done with the thread; the OS thread leaves /proc a moment
    # later. Linux reuses thread ids only after many more.
    deadline = time.monotonic() + 10
    while thread_split.thread_counters(thread.native_id) is not None:
        assert time.monotonic() < deadline, "the ended thread is still in /proc"
        time.sleep(0.01)


def test_kinds_name_a_plain_thread_by_its_target_and_a_subclass_by_its_class() -> None:
    plain = threading.Thread(target=_spin, name="settle-1")
    assert thread_split.kind_of(plain) == "settle:_spin"
    assert thread_split.kind_of(_Named()) == "_Named"
    assert thread_split.kind_of(threading.Thread(name="bare")) == "bare"


def test_a_sample_counts_each_live_kind() -> None:
    stop = threading.Event()
    threads = [threading.Thread(target=stop.wait, name=f"waiter-{n}") for n in range(3)]
    for thread in threads:
        thread.start()
    try:
        kinds = thread_split.sample()
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert kinds["waiter:Event.wait"][-1] == 3
    assert kinds["_MainThread"][-1] == 1


def _write(path: Path, samples: list[tuple[int, dict[str, list[int]]]]) -> None:
    path.write_text(
        "".join(
            json.dumps({"at": n, "jobs": jobs, "kinds": kinds}) + "\n"
            for n, (jobs, kinds) in enumerate(samples)
        )
    )


def test_per_job_divides_the_growth_between_the_first_and_the_last_job(tmp_path: Path) -> None:
    # Before the first job and after the last, the counts move (start-up, the drain's
    # tail): none of it is counted.
    _write(
        tmp_path / "1.jsonl",
        [
            (0, {"worker": [900, 900, 900, 900, 8]}),
            (10, {"worker": [1000, 100, 50, 20, 8], "sender": [10, 0, 30, 0, 1]}),
            (60, {"worker": [1500, 150, 150, 70, 8], "sender": [60, 10, 130, 5, 1]}),
            (110, {"worker": [2000, 200, 250, 120, 8], "sender": [110, 20, 230, 10, 1]}),
            (120, {"worker": [9000, 9000, 9000, 9000, 8], "sender": [900, 900, 900, 900, 1]}),
        ],
    )
    split = thread_split.per_job([tmp_path / "1.jsonl"], tick_us=10_000)
    assert list(split) == ["worker", "sender"]
    assert split["worker"] == {
        "cpu_us": 110_000.0,
        "system_cpu_us": 10_000.0,
        "voluntary_switches": 2.0,
        "involuntary_switches": 1.0,
    }
    assert split["sender"]["cpu_us"] == 12_000.0
    assert split["sender"]["voluntary_switches"] == 2.0


def test_a_process_without_a_window_adds_nothing(tmp_path: Path) -> None:
    _write(tmp_path / "idle.jsonl", [(0, {"worker": [1, 1, 1, 1, 1]})])
    _write(
        tmp_path / "short.jsonl",
        [(0, {"w": [0, 0, 0, 0, 1]}), (5, {"w": [5, 0, 0, 0, 1]}), (9, {"w": [9, 0, 0, 0, 1]})],
    )
    assert thread_split.per_job([tmp_path / "idle.jsonl"], tick_us=10_000) == {}
    assert thread_split.window([]) is None
    assert thread_split.per_job([tmp_path / "short.jsonl"], tick_us=10_000) == {}


def test_medians_take_each_kind_over_the_measures_that_saw_it() -> None:
    def figures(cpu: float) -> dict[str, float]:
        return {key: cpu for key in thread_split.FIGURES}

    splits = [
        {"worker": figures(10), "sender": figures(1)},
        {"worker": figures(30)},
        {"worker": figures(20), "sender": figures(3)},
    ]
    medians = thread_split.medians(splits)
    assert list(medians) == ["worker", "sender"]
    assert medians["worker"]["cpu_us"] == 20
    assert medians["sender"]["involuntary_switches"] == 2
