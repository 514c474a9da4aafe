"""The bookkeeping of a server this run owns: its lock, port, pid and logs.

A lock file under each service's folder keeps two processes from driving the same data
directory; the kernel releases it when its holder dies, so it never goes stale. A killed run
can leave a server running (adopted by the next run) or a stale pid file (removed).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from shared.errors import SpeedtierError

logger = logging.getLogger("services.app.embedded")

LOCALHOST = "127.0.0.1"
START_TIMEOUT_SECONDS = 30.0


class EmbeddedServiceError(SpeedtierError, RuntimeError):
    """An embedded service could not be resolved, started or stopped."""


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

    def crash(self) -> None:
        """SIGKILL the server, as a crash would (no shutdown, no final save), and let go of
        its data directory: starting it again on the same directory recovers what it had
        written (the embedded Redis keeps an append-only file). For fault tests and the
        chaos suite."""
        if self._lock is None:
            return
        try:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            # Reaps our own child (the shutdown finds it gone) or waits for an adopted one.
            with contextlib.suppress(Exception):
                self._shutdown()
            wait_gone(self.pid, 15.0)
        finally:
            self._lock.close()
            self._lock = None


def acquire_lock(directory: Path, name: str) -> IO[bytes]:
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


def choose_port(directory: Path, requested: int | None, default: int) -> int:
    if requested is not None:
        return requested if requested else free_port()
    for candidate in (stored_port(directory), default):
        if candidate is not None and _port_free(candidate):
            return candidate
    return free_port()


def stored_port(directory: Path) -> int | None:
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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOCALHOST, 0))
        return int(sock.getsockname()[1])


def remove_stale_pidfile(path: Path, name: str) -> None:
    """Remove a pid file whose process is gone (or a zombie, or someone else's)."""
    try:
        pid = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        path.unlink(missing_ok=True)
        return
    if process_uses(pid, name):
        return
    logger.warning("removing stale %s pid file %s (pid %s is not running)", name, path, pid)
    path.unlink(missing_ok=True)


def pid_exists(pid: int) -> bool:
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
    if not pid_exists(pid):
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] != "Z"


def process_uses(pid: int, needle: str) -> bool:
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


def wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            logger.warning("process %s still running after %.0fs; killing it", pid, timeout)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            return
        time.sleep(0.05)


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
