"""How a server's open client connections are spread over its processes, read from /proc.

With keep-alive clients a connection stays with the process that accepted it, so a load
step's throughput depends on that spread: every connection on one gunicorn worker means one
core's worth of Python serving all of them. The enqueue API benchmark samples it in the
middle of each step and reports it next to the step's rate.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable

from bench.common import process_stats

_ESTABLISHED = "01"


def _established_inodes(port: int) -> set[str]:
    """Socket inodes of established TCP connections whose local port is ``port``."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as lines:
                next(lines)
                for line in lines:
                    fields = line.split()
                    local, state, inode = fields[1], fields[3], fields[9]
                    if state == _ESTABLISHED and int(local.rsplit(":", 1)[1], 16) == port:
                        inodes.add(inode)
        except FileNotFoundError:
            continue
    return inodes


def _socket_inodes(pid: int) -> Iterable[str]:
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            yield target[8:-1]


def connections_per_process(leader: int, port: int) -> list[int]:
    """The number of established connections on ``port`` each child of ``leader`` (a
    gunicorn arbiter leading its process group: the children are its workers) holds, most
    first, a worker holding none as 0."""
    inodes = _established_inodes(port)
    counts = [
        sum(1 for inode in _socket_inodes(pid) if inode in inodes)
        for pid, fields in process_stats()
        if int(fields[2]) == leader and int(fields[1]) == leader
    ]
    return sorted(counts, reverse=True)


class SpreadSample:
    """``connections_per_process`` taken once, ``delay`` seconds from now, in a thread."""

    def __init__(self, leader: int, port: int, delay: float) -> None:
        self.spread: list[int] | None = None
        self._timer = threading.Timer(delay, self._take, (leader, port))
        self._timer.daemon = True
        self._timer.start()

    def _take(self, leader: int, port: int) -> None:
        self.spread = connections_per_process(leader, port)

    def result(self) -> list[int] | None:
        """The spread, or None when the step ended before the sample was taken."""
        self._timer.cancel()
        self._timer.join()
        return self.spread
