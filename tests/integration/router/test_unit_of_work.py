"""The unit of work: writes commit before their follow-up jobs are enqueued, on real
PostgreSQL and Redis."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from router.enqueue import Router
from router.registry import Registry
from router.requests import JobRequest
from router.unit_of_work import unit_of_work
from shared.errors import QueueUnavailable, ValidationFailed
from tests import platform_harness as h
from tiers.broker import TierBroker


@pytest.fixture
def probe(engine: Engine) -> Iterator[str]:
    """A table of its own for one test."""
    table = f"uow_probe_{uuid.uuid4().hex[:8]}"
    with engine.begin() as connection:
        connection.execute(text(f"CREATE TABLE {table} (item text)"))
    yield table
    with engine.begin() as connection:
        connection.execute(text(f"DROP TABLE {table}"))


def rows(engine: Engine, table: str) -> list[str]:
    with engine.connect() as connection:
        return [r[0] for r in connection.execute(text(f"SELECT item FROM {table}"))]


def write(session: Session, table: str, item: str) -> None:
    session.execute(text(f"INSERT INTO {table} VALUES (:item)"), {"item": item})


def request(item: str) -> JobRequest:
    return JobRequest("t_plain", 1, {"item": item})


def test_follow_ups_are_enqueued_after_the_commit(
    db_session_factory: sessionmaker[Session], router: Router, engine: Engine, probe: str
) -> None:
    broker: TierBroker = router.broker
    with unit_of_work(db_session_factory, router) as uow:
        write(uow.session, probe, "a")
        uow.enqueue(request("a"))
        # Given nothing committed yet, nothing is queued
        assert h.state(broker, "plain-a") is None
        answers = uow.commit()
    assert [a.outcome for a in answers] == ["added"]
    assert rows(engine, probe) == ["a"]
    assert h.state(broker, "plain-a") == "waiting"


def test_a_unit_that_does_not_commit_writes_nothing_and_enqueues_nothing(
    db_session_factory: sessionmaker[Session], router: Router, engine: Engine, probe: str
) -> None:
    with pytest.raises(RuntimeError), unit_of_work(db_session_factory, router) as uow:
        write(uow.session, probe, "b")
        uow.enqueue(request("b"))
        raise RuntimeError("the unit fails before its commit")
    assert rows(engine, probe) == []
    assert h.state(router.broker, "plain-b") is None


def test_an_invalid_follow_up_is_refused_before_anything_is_written(
    db_session_factory: sessionmaker[Session], router: Router, engine: Engine, probe: str
) -> None:
    with unit_of_work(db_session_factory, router) as uow:
        write(uow.session, probe, "c")
        with pytest.raises(ValidationFailed):
            uow.enqueue(JobRequest("t_plain", 1, {"nope": 1}))
    assert rows(engine, probe) == []


def test_redis_refusing_the_follow_ups_keeps_the_writes_and_says_so(
    db_session_factory: sessionmaker[Session], engine: Engine, probe: str, namespace: str
) -> None:
    # A router whose Redis is gone (nothing listens on port 1)
    broker = h.make_broker("redis://127.0.0.1:1/0", namespace)
    registry = Registry()
    for family in h.families().values():
        registry.add(family)
    gone = Router(registry, broker)
    with unit_of_work(db_session_factory, gone) as uow:
        write(uow.session, probe, "d")
        uow.enqueue(request("d"))
        with pytest.raises(QueueUnavailable):
            uow.commit()
    # The writes stay: the caller's retry (or a sweep) re-derives the same job ids
    assert rows(engine, probe) == ["d"]
