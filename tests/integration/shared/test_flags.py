"""Kill switches in Flipper's tables on a real PostgreSQL (``shared.flags``): what a read
sees, several read in one statement, and a read that waits for the same read in flight
instead of sending its own (a starting worker's warm-up and its first job)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from shared.db.engine import make_engine
from shared.flags import Flags

RAISED, LOWERED, OTHER = "pause_flags_test_raised", "pause_flags_test_lowered", "pause_other"


class Sent:
    """The statements an engine sends to ``flipper_gates`` and the connections it takes
    from its pool."""

    def __init__(self, engine: Engine) -> None:
        self.reads = 0
        self.connections = 0
        event.listen(engine, "before_cursor_execute", self._statement)
        event.listen(engine, "checkout", self._connected)

    def _statement(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "FROM flipper_gates" in statement:
            self.reads += 1

    def _connected(self, *_args: Any) -> None:
        self.connections += 1


@pytest.fixture
def gates(database_url: str) -> Iterator[Engine]:
    """A fresh engine (its own pool) on the migrated database, RAISED raised."""
    engine = make_engine(database_url)
    Flags(engine).set(RAISED, True)
    Flags(engine).set(LOWERED, False)
    yield engine
    Flags(engine).set(RAISED, False)
    engine.dispose()


@pytest.fixture
def table_locked(database_url: str) -> Iterator[tuple[threading.Event, Engine]]:
    """``flipper_gates`` locked by another transaction until the event is set."""
    locker = make_engine(database_url)
    release, locked = threading.Event(), threading.Event()

    def hold() -> None:
        with locker.begin() as connection:
            connection.execute(text("LOCK TABLE flipper_gates IN ACCESS EXCLUSIVE MODE"))
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert locked.wait(10)
    try:
        yield release, locker
    finally:
        release.set()
        holder.join(10)
        locker.dispose()


def waiting_on_lock(locker: Engine, timeout: float = 10) -> int:
    """The pid of the backend waiting on the lock of ``flipper_gates`` (once one is)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with locker.connect() as connection:
            pid = connection.execute(
                text(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database() AND query LIKE '%FROM flipper_gates%'"
                )
            ).scalar()
        if pid:
            return int(pid)
        time.sleep(0.02)
    raise AssertionError("no read of flipper_gates waits on the lock")


def test_a_raised_flag_reads_on_and_several_are_read_in_one_statement(gates: Engine) -> None:
    sent = Sent(gates)
    flags = Flags(gates, overrides={OTHER: True})

    assert flags.read_many([RAISED, LOWERED, OTHER, RAISED]) == {RAISED: True, LOWERED: False}
    assert sent.reads == 1
    # Cached: the jobs' reads that follow send nothing; the override is never read.
    assert flags.is_enabled(RAISED) and not flags.is_enabled(LOWERED) and flags.is_enabled(OTHER)
    assert sent.reads == 1
    assert flags.read_many([OTHER]) == {} and sent.reads == 1


def test_a_read_in_flight_answers_the_same_flag_read_meanwhile(
    gates: Engine, table_locked: tuple[threading.Event, Engine]
) -> None:
    release, locker = table_locked
    flags = Flags(gates)
    sent = Sent(gates)
    results: dict[str, Any] = {}
    ahead = threading.Thread(target=lambda: results.update(ahead=flags.read_many([RAISED])))
    ahead.start()
    waiting_on_lock(locker)
    job = threading.Thread(target=lambda: results.update(job=flags.is_enabled(RAISED)))
    job.start()
    job.join(0.3)
    assert job.is_alive()  # waits for the read ahead of it, sending nothing of its own
    assert (sent.reads, sent.connections) == (1, 1)

    release.set()
    ahead.join(10)
    job.join(10)
    assert results == {"ahead": {RAISED: True}, "job": True}
    assert (sent.reads, sent.connections) == (1, 1)


def test_a_read_in_flight_that_fails_is_tried_again_by_the_read_waiting_for_it(
    gates: Engine, table_locked: tuple[threading.Event, Engine]
) -> None:
    release, locker = table_locked
    flags = Flags(gates)
    sent = Sent(gates)
    errors: list[BaseException] = []
    answers: list[bool] = []

    def ahead() -> None:
        try:
            flags.read_many([RAISED])
        except Exception as exc:
            errors.append(exc)

    first = threading.Thread(target=ahead)
    first.start()
    backend = waiting_on_lock(locker)
    job = threading.Thread(target=lambda: answers.append(flags.is_enabled(RAISED)))
    job.start()
    job.join(0.3)
    with locker.connect() as connection:  # the read ahead loses its connection
        connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": backend})
    first.join(10)
    assert len(errors) == 1
    release.set()
    job.join(10)
    assert answers == [True]
    assert sent.reads == 2  # the failed read, then the job's own


def test_without_a_cache_every_read_goes_to_the_table(gates: Engine) -> None:
    sent = Sent(gates)
    flags = Flags(gates, cache_seconds=0)
    assert flags.is_enabled(RAISED) and flags.is_enabled(RAISED)
    assert sent.reads == 2


def test_states_take_overrides_and_the_cache_and_read_the_rest_in_one_statement(
    gates: Engine,
) -> None:
    # Given a flag forced by SPEEDTIER_FLAGS and two that are neither forced nor cached
    flags = Flags(gates, overrides={OTHER: True}, cache_seconds=60)
    sent = Sent(gates)
    # When every state is asked for at once
    states = flags.states([RAISED, LOWERED, OTHER, RAISED])
    # Then each is as is_enabled says, and the two are read in one statement
    assert states == {RAISED: True, LOWERED: False, OTHER: True}
    assert list(states) == sorted(states)
    assert sent.reads == 1
    # And once they are cached, neither is read again
    assert flags.states([RAISED, LOWERED]) == {RAISED: True, LOWERED: False}
    assert sent.reads == 1
