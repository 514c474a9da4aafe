"""Start multiprocessing's fork server as a fork of the calling process instead of a new
interpreter (``services.app.worker_pool``).

``multiprocessing.forkserver.ensure_running`` starts the server as a fresh interpreter: its
start, its ``site`` and ``multiprocessing``'s modules, then the program's ``__main__`` and
command line again, a few tens of milliseconds before the server imports anything for its
children. The pool's parent has loaded just those when it starts the server, so forking it
gives the server the same state at once, and the children it forks are the same as
those of a spawned server: the server runs ``multiprocessing.forkserver.main`` over the
same socket and "alive" pipe, imports the same ``preload`` (``__main__`` is already this
program's) and serves the same requests.

Forking is safe only while the caller has one thread, and it relies on the fork server's
internals as CPython 3.11 to 3.13 have them (the parameters of ``forkserver.main`` and the
server's address, pid and alive fd): otherwise :func:`start_forked_server` returns False and
the caller starts the server as multiprocessing does. The program's entry point forks the
server sooner, before this module (and ``multiprocessing``) loads
(``services.app.server_first``); the server then runs :func:`serve`, and the pool's process
takes it as its own with :func:`adopt_forked_server`.
"""

from __future__ import annotations

import gc
import os
import socket
import sys
import threading
import traceback
from collections.abc import Sequence
from multiprocessing import connection, forkserver, resource_tracker, util
from typing import Any, NoReturn

#: ``forkserver.main``'s parameters this module calls it with.
MAIN_PARAMETERS = ("listener_fd", "alive_r", "preload", "main_path", "sys_path")
#: The server state ``ForkServer.ensure_running`` reads and sets.
SERVER_STATE = ("_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid", "_lock")


def can_fork_server() -> bool:
    """This process has one thread, and the fork server is the one this module knows."""
    return sys.platform != "win32" and threading.active_count() == 1 and knows_the_server()


def knows_the_server() -> bool:
    """This ``multiprocessing``'s fork server keeps the state and takes the parameters this
    module sets and passes (CPython 3.11 to 3.13)."""
    server = getattr(forkserver, "_forkserver", None)
    return (
        server is not None
        and all(hasattr(server, name) for name in SERVER_STATE)
        and _parameters(forkserver.main) == MAIN_PARAMETERS
    )


def _parameters(function: Any) -> tuple[str, ...]:
    """The names of a plain function's parameters (without ``inspect``, which a worker's
    start would otherwise import for this alone)."""
    code = function.__code__
    return tuple(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])


def start_forked_server(preload: Sequence[str]) -> bool:
    """Start the fork server, importing ``preload``, as a fork of this process; False (and
    nothing started) when :func:`can_fork_server` says no or a server already runs."""
    server: Any = getattr(forkserver, "_forkserver", None)
    if not can_fork_server() or server._forkserver_pid is not None:
        return False
    with socket.socket(socket.AF_UNIX) as listener:
        address = connection.arbitrary_address("AF_UNIX")  # type: ignore[attr-defined]
        listener.bind(address)
        if not util.is_abstract_socket_namespace(address):
            os.chmod(address, 0o600)
        listener.listen()
        # Every client holds the write end of the "alive" pipe: the server exits once the
        # read end meets its end, when the last client is gone.
        alive_r, alive_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(alive_w)
            serve(listener.fileno(), alive_r, preload)
        os.close(alive_r)
    if adopt_forked_server(address, alive_w, pid):
        return True
    os.close(alive_w)  # a server started meanwhile: this one exits
    return False


def adopt_forked_server(address: str, alive_w: int, pid: int) -> bool:
    """Make the server forked at ``pid`` (listening at ``address``, its "alive" pipe's write
    end ``alive_w``) the fork server of this process's ``multiprocessing``, with the resource
    tracker its children are handed, as ``ForkServer.ensure_running`` does for a server it
    spawns; False when this ``multiprocessing``'s fork server is not the one this module
    knows, or one already runs."""
    if not knows_the_server():
        return False
    server: Any = forkserver._forkserver  # its private state, typed by none
    with server._lock:
        if server._forkserver_pid is not None:
            return False
        resource_tracker.ensure_running()  # its fd goes with every request for a child
        server._forkserver_address = address
        server._forkserver_alive_fd = alive_w
        server._forkserver_pid = pid
    return True


def serve(listener_fd: int, alive_r: int, preload: Sequence[str]) -> NoReturn:
    """The forked server's life: never returns (its exit skips the parent's exit handlers
    and buffers, as the children the server forks do)."""
    code = 1
    try:
        gc.enable()  # as in a new interpreter: the preload turns it off while it imports
        if knows_the_server():
            forkserver.main(listener_fd, alive_r, list(preload))
    except SystemExit as stop:  # the last client is gone
        code = stop.code if isinstance(stop.code, int) else 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(code)
