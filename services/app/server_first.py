"""Fork the worker pool's server first, before this process loads anything else.

A new pool's first job waits for its fork server's imports (``services.app.fork_server``,
about 0.4 s); whatever the pool's process does before it forks the server delays them. Loading
``multiprocessing`` (its connection, context and resource tracker modules, with ``socket``,
``pathlib`` and ``tempfile``) took that process 20 to 30 ms. Here the server is forked with
what the interpreter has already loaded: the server's listening socket is made with the C
``_socket`` module at an abstract address (Linux), the "alive" pipe with ``os.pipe``, and
the metrics directory the server's children share is made with ``os.mkdir``. After the fork
each side loads ``multiprocessing`` on its own core: the server to serve
(``services.app.server_fork.serve``), this process to take the server as its own
(``services.app.server_fork.adopt_forked_server``), as ``multiprocessing`` does with a server
it started.

Everything here that cannot be done so (another platform, a thread running, an address or a
directory that cannot be made, a ``multiprocessing`` whose fork server this project does not
know) gives up before the fork, or kills the forked server: the worker command then starts
the server itself, as it does for any other command line.
"""

from __future__ import annotations

import _socket
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

#: What the pool's fork server imports before it forks a child: the program's ``__main__``
#: (as a spawned child would) and the worker's modules (``services.app.fork_server``).
FORK_SERVER_PRELOAD = ("__main__", "services.app.fork_server")

#: prometheus_client's variable: the directory where a process's children write their values.
METRICS_DIRECTORY = "PROMETHEUS_MULTIPROC_DIR"


def share_metrics() -> None:
    """Give this process's children a metrics directory (a fresh private one under the
    temporary directory when ``PROMETHEUS_MULTIPROC_DIR`` is not set): before any child or
    the children's server starts, as they read it when they import prometheus_client."""
    if os.environ.get(METRICS_DIRECTORY):
        return
    try:
        directory = _private_directory("speedtier-metrics-")
    except OSError:
        import tempfile  # its search for a writable temporary directory

        directory = tempfile.mkdtemp(prefix="speedtier-metrics-")
    os.environ[METRICS_DIRECTORY] = directory


def _private_directory(prefix: str) -> str:
    """A new directory only this user may enter, as ``tempfile.mkdtemp`` makes one under
    ``TMPDIR`` (or ``/tmp``), without loading ``tempfile``."""
    base = os.environ.get("TMPDIR") or "/tmp"
    for _ in range(10):
        path = os.path.join(base, prefix + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return os.path.abspath(path)
    raise FileExistsError(f"no new directory under {base}")


def fork_server_first(preload: Sequence[str] = FORK_SERVER_PRELOAD) -> bool:
    """Fork the pool's server now, importing ``preload``, and make it this process's
    ``multiprocessing`` fork server; False when it was not (nothing runs then)."""
    threading = sys.modules.get("threading")
    if not sys.platform.startswith("linux") or (
        threading is not None and threading.active_count() > 1
    ):
        return False
    share_metrics()  # before the server imports prometheus_client
    listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        # An abstract address: nothing on the file system to remove, none to collide with.
        address = f"\0speedtier-fork-server-{os.getpid()}-{os.urandom(8).hex()}"
        listener.bind(address)
        listener.listen()
        # Every client holds the write end: the server exits once the read end meets its end.
        alive_r, alive_w = os.pipe()
    except OSError:
        listener.close()
        return False
    try:
        pid = os.fork()
    except OSError:
        for fd in (alive_r, alive_w):
            os.close(fd)
        listener.close()
        return False
    if pid == 0:
        _serve(listener.fileno(), alive_r, alive_w, preload)
    os.close(alive_r)
    listener.close()
    from services.app.server_fork import adopt_forked_server

    if adopt_forked_server(address, alive_w, pid):
        return True
    os.close(alive_w)
    os.kill(pid, 9)  # SIGKILL (the signal module would load enum first)
    os.waitpid(pid, 0)
    return False


def _serve(listener_fd: int, alive_r: int, alive_w: int, preload: Sequence[str]) -> NoReturn:
    """The forked server: it never returns to the program this process was running."""
    try:
        os.close(alive_w)
        from services.app.server_fork import serve

        serve(listener_fd, alive_r, preload)
    finally:
        os._exit(1)
