"""A listening socket per gunicorn worker, so the kernel spreads connections over workers.

gunicorn's arbiter opens the listening socket and every worker inherits it: each worker's
main thread waits for it to become readable and accepts one connection per wake-up, and the
first worker to get a core drains the queue. A client that opens its connections together
(a connection pool filling, every closed-loop benchmark) lands them on one worker, 50 µs
apart; keep-alive then pins each connection to that worker for its life, and one worker
(one interpreter lock: one core) serves everything while the others idle. Measured with 2
workers and 32 keep-alive clients (``python -m bench.enqueue_api``): 32 connections on one
worker gave 876 requests/s at p50 36 ms, against 1,770 with 15 and 17.

With :class:`WorkerListeners` as gunicorn's ``when_ready`` and ``post_fork`` hooks, the
arbiter binds the configured address as usual (so a port already taken fails the start as
before), notes the address it got and closes its socket once ready; each worker then binds
a socket of its own to that address with ``SO_REUSEPORT``, and the kernel deals each new
connection to one of them by a hash of its addresses. gunicorn 24 and later do the same
when ``reuse_port`` is on (a worker that finds sockets of its own already leaves them).

=========================================  ===============================================
what goes wrong                            what happens
=========================================  ===============================================
a worker hangs                             its share of new connections waits in its queue
                                           until gunicorn's ``timeout`` (30 s) replaces it;
                                           the other workers serve theirs
a worker exits or is killed                connections queued on its socket and not yet
                                           accepted are reset (the client sees a reset
                                           connection and sends again); with the sysctl
                                           ``net.ipv4.tcp_migrate_req=1`` the kernel moves
                                           them to another worker's queue instead
no worker runs (all of them restarting)    connections are refused, not queued: the
                                           arbiter holds no socket on the port
a bind address that is not TCP (a Unix     the workers share the arbiter's socket, as
socket, a socket passed in by systemd)     gunicorn does by default
``SIGUSR2`` (gunicorn's re-exec upgrade)   not supported: the arbiter keeps no socket to
                                           hand over; deployments roll pods instead
=========================================  ===============================================
"""

from __future__ import annotations

import socket
from typing import Any


class WorkerListeners:
    """gunicorn hooks that give each worker a listening socket of its own."""

    def __init__(self) -> None:
        #: The addresses the arbiter bound (the port it got when asked for port 0).
        self.addresses: list[Any] = []

    def release(self, server: Any) -> None:
        """``when_ready``: note the arbiter's TCP addresses and close its sockets, which the
        workers replace with their own (kept when any of them is not TCP)."""
        listeners = list(server.LISTENERS)
        if not listeners or any(
            lnr.family not in (socket.AF_INET, socket.AF_INET6) for lnr in listeners
        ):
            return
        self.addresses = [lnr.getsockname() for lnr in listeners]
        for lnr in listeners:
            lnr.close()
        server.LISTENERS = []

    def open_own(self, _server: Any, worker: Any) -> None:
        """``post_fork``, in the worker before it starts: bind and listen on a socket of its
        own per noted address (nothing when the worker already has sockets)."""
        if worker.sockets or not self.addresses:
            return
        worker.sockets = [listen_shared(address, worker.cfg.backlog) for address in self.addresses]


def listen_shared(address: Any, backlog: int) -> socket.socket:
    """A listening TCP socket on ``address`` that other sockets of this user may bind too
    (``SO_REUSEPORT``), with gunicorn's options: address reuse, ``TCP_NODELAY`` (which the
    accepted connections inherit), non-blocking."""
    family = socket.AF_INET6 if len(address) == 4 else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        listener.bind(address)
        listener.listen(backlog)
        listener.setblocking(False)
    except BaseException:
        listener.close()
        raise
    return listener
