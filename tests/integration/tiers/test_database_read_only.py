"""A PostgreSQL that refuses writes for now (read-only, in recovery, failing over) is an
outage: the run is delayed and no attempt is spent, as for a lost connection. The test's own
database is made read-only with ``default_transaction_read_only``; real worker, real Redis."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy
from sqlalchemy import text

from router.enqueue import Router
from router.requests import JobRequest
from shared.outages import is_infrastructure_outage
from tests import platform_harness as h
from tests.fixtures_db import create_database, drop_database
from tiers.broker import TierBroker
from tiers.middleware import outcomes


@pytest.fixture
def own_database() -> Iterator[str]:
    url = create_database("speedtier_readonly")
    yield url
    drop_database(url)


def set_read_only(url: str, on: bool) -> None:
    name = url.rsplit("/", 1)[-1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        if on:
            admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        else:
            admin.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')


def test_a_refused_write_and_an_admin_shutdown_are_outages(own_database: str) -> None:
    set_read_only(own_database, True)
    # A write to a read-only database (SQLSTATE 25006), raw and as SQLAlchemy wraps it
    with (
        psycopg.connect(own_database, autocommit=True) as connection,
        pytest.raises(psycopg.errors.ReadOnlySqlTransaction) as raw,
    ):
        connection.execute("CREATE TABLE refused (id int)")
    engine = sqlalchemy.create_engine(
        own_database.replace("postgresql://", "postgresql+psycopg://")
    )
    with engine.connect() as connection, pytest.raises(sqlalchemy.exc.InternalError) as wrapped:
        connection.execute(text("CREATE TABLE refused (id int)"))
    engine.dispose()
    assert is_infrastructure_outage(raw.value)
    assert is_infrastructure_outage(wrapped.value)
    # A session ended by the server (SQLSTATE 57P01, as in a failover)
    set_read_only(own_database, False)
    with psycopg.connect(own_database, autocommit=True) as victim:
        pid = victim.info.backend_pid
        with psycopg.connect(own_database, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(psycopg.OperationalError) as ended:
            victim.execute("SELECT 1")
    assert is_infrastructure_outage(ended.value)


def test_a_job_writing_to_a_read_only_database_is_delayed_without_spending_an_attempt(
    router: Router, broker: TierBroker, own_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outcomes, "OUTAGE_DELAY_SECONDS", 0.3)
    # Given the job's database read-only (a managed failover, a replica promoted late)
    set_read_only(own_database, True)
    request = JobRequest("t_plain", 1, {"item": "w", "mode": "write", "database": own_database})
    router.enqueue(request)
    with h.running_worker(broker):
        # When the job runs, then it is delayed and no attempt is spent
        h.wait_until(lambda: (broker.jobs.record("plain-w") or {}).get("last_delay", "") != "")
        record = broker.jobs.record("plain-w") or {}
        assert (record["state"], record["failures"]) == ("delayed", "0")
        assert record["last_delay"].startswith("outage")
        # And once the database takes writes again the job completes, its attempts intact
        set_read_only(own_database, False)
        h.wait_until(lambda: h.state(broker, "plain-w") == "completed")
    assert (broker.jobs.record("plain-w") or {})["failures"] == "0"
