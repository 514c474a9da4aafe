"""tiers.work_queue.WorkQueue: Dramatiq's work-queue order and interface, item for item."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

import pytest
from dramatiq.worker import _WorkQueueItem
from hypothesis import given
from hypothesis import strategies as st

from tiers.work_queue import WorkQueue


@dataclass
class Item:
    priority: int
    name: str = field(default="")


@given(st.lists(st.tuples(st.booleans(), st.integers(-3, 3)), max_size=60))
def test_gets_come_in_priority_order_then_first_queued(steps: list[tuple[bool, int]]) -> None:
    # Given any interleaving of puts (random priorities) and gets
    ours, reference = WorkQueue(), queue.PriorityQueue[_WorkQueueItem]()
    for number, (is_put, priority) in enumerate(steps):
        if is_put:
            ours.put(Item(priority, str(number)))
            reference.put(_WorkQueueItem(priority, str(number)))  # type: ignore[arg-type]
            time.sleep(0)  # distinct queued times for the reference's FIFO tie-break
        elif not reference.empty():
            # Then each get takes what Dramatiq's own queue would have handed out
            assert ours.get_nowait().name == reference.get_nowait().message
        else:
            with pytest.raises(queue.Empty):
                ours.get_nowait()
    assert ours.qsize() == reference.qsize()


def test_get_waits_at_most_its_timeout_and_wakes_on_a_put() -> None:
    work = WorkQueue()
    started = time.monotonic()
    with pytest.raises(queue.Empty):
        work.get(timeout=0.05)
    assert 0.04 <= time.monotonic() - started < 1.0

    threading.Timer(0.05, work.put, args=(Item(0, "late"),)).start()
    assert work.get(timeout=5).name == "late"
    assert work.empty()


def test_join_returns_once_every_item_is_done_and_extra_task_done_is_refused() -> None:
    work = WorkQueue()
    for number in range(3):
        work.put(Item(0, str(number)))
    joined = threading.Event()

    def join() -> None:
        work.join()
        joined.set()

    threading.Thread(target=join, daemon=True).start()
    for _ in range(3):
        work.get()
    work.task_done()
    work.task_done()
    assert not joined.wait(0.1) and work.unfinished_tasks == 1
    work.task_done()
    assert joined.wait(5)
    with pytest.raises(ValueError, match="too many"):
        work.task_done()


def test_threads_taking_work_get_every_item_exactly_once() -> None:
    work, taken, lock = WorkQueue(), [], threading.Lock()

    def take() -> None:
        while True:
            try:
                item = work.get(timeout=0.5)
            except queue.Empty:
                return
            with lock:
                taken.append(item.name)
            work.task_done()

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for number in range(20_000):
        work.put(Item(number % 3, str(number)))
    work.join()
    for thread in threads:
        thread.join()
    assert sorted(taken, key=int) == [str(n) for n in range(20_000)]
