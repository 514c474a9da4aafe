"""A PostgreSQL that refuses writes for now (read-only, in recovery, failing over) is an
outage: the run is delayed and no attempt is spent, as for a lost connection. The test's own
database is made read-only with ``default_transaction_read_only``, and a real standby
(``pg_basebackup`` of an embedded primary, on free ports) is promoted late; real worker,
real Redis."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy
from sqlalchemy import text

from router.enqueue import Router
from router.requests import JobRequest
from services.app.embedded.postgres_server import _PostgresRunner, start_embedded_postgres
from services.app.embedded.process import EmbeddedServiceError
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


@pytest.fixture
def standby(tmp_path: Path) -> Iterator[str]:
    """A standby (in recovery, streaming from an embedded primary): its URL. The test is
    skipped, saying why, when the standby cannot be set up (pg_basebackup or the standby's
    start failing on this machine); what it checks never is."""
    primary = start_embedded_postgres(tmp_path / "primary", port=0)
    try:
        runner = _PostgresRunner(tmp_path / "primary")
        copy = tmp_path / "standby"
        port = primary.url.rsplit(":", 1)[1].split("/")[0]
        # -R: a standby of the primary; -c fast: no wait for a spread checkpoint; -N: a
        # test's copy needs no fsync
        command = [str(runner.bin_dir / "pg_basebackup"), "-h", "127.0.0.1", "-p", port]
        command += ["-U", "postgres", "-D", str(copy / "data"), "-R", "-X", "stream"]
        command += ["-c", "fast", "-N"]
        copied = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if copied.returncode != 0:
            pytest.skip(f"no standby: pg_basebackup failed: {copied.stderr.strip()}")
        if runner.user is not None:  # PostgreSQL refuses root: the copy is that user's
            shutil.chown(copy, runner.user.pw_uid, runner.user.pw_gid)
            for path in copy.rglob("*"):
                os.chown(path, runner.user.pw_uid, runner.user.pw_gid, follow_symlinks=False)
        try:
            replica = start_embedded_postgres(copy, port=0)
        except EmbeddedServiceError as exc:
            pytest.skip(f"no standby: it did not start: {exc}")
        try:
            yield replica.url
        finally:
            replica.stop()
    finally:
        primary.stop()


def test_a_job_writing_to_a_standby_waits_for_its_promotion_without_spending_attempts(
    router: Router, broker: TierBroker, standby: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outcomes, "OUTAGE_DELAY_SECONDS", 0.3)
    # Given a job whose database is a standby still in recovery (a replica promoted late)
    with psycopg.connect(standby, autocommit=True) as connection:
        assert connection.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
    router.enqueue(JobRequest("t_plain", 1, {"item": "s", "mode": "write", "database": standby}))
    with h.running_worker(broker):
        # When it runs, then it is delayed, attempt not spent
        h.wait_until(lambda: (broker.jobs.record("plain-s") or {}).get("last_delay", "") != "")
        record = broker.jobs.record("plain-s") or {}
        assert (record["state"], record["failures"]) == ("delayed", "0")
        # And once the standby is promoted the job completes, its attempts intact
        with psycopg.connect(standby, autocommit=True) as connection:
            connection.execute("SELECT pg_promote()")
        h.wait_until(lambda: h.state(broker, "plain-s") == "completed", timeout=30)
    assert (broker.jobs.record("plain-s") or {})["failures"] == "0"
