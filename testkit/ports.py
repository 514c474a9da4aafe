"""A port for a server a test or a benchmark starts: free when chosen, and outside the
kernel's range of ephemeral ports.

A port found by binding to port 0 comes from the ephemeral range, the range every outgoing
connection on the machine also draws its local port from: between the check and the server's
own bind (a subprocess's start, a second or more), a connection of any process may take it,
and the server fails to start (a redis-server exited so, once in five suite runs). Below that
range only a listener takes a port, and a listener already there fails the check here; tests
(or benchmarks) running side by side each draw at random from some twenty thousand ports.
"""

from __future__ import annotations

import random
import socket

#: Where the ports are drawn from when the kernel's ephemeral range cannot be read (Linux's
#: default range starts at 32768).
LOWEST = 10_000
DEFAULT_EPHEMERAL_START = 32_768
TRIES = 200


def _ephemeral_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_START


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nothing listens on now, below the ephemeral range when that leaves
    room (else one the kernel picks, as binding to port 0 does)."""
    top = _ephemeral_start() - 1
    if top - LOWEST >= 1_000:
        for _ in range(TRIES):
            port = random.randint(LOWEST, top)
            if _bindable(port):
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
