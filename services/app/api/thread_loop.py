"""gunicorn's gthread worker, its loop's bookkeeping constant per request.

gunicorn's ``ThreadWorker`` keeps its in-flight requests and its idle keep-alive
connections in deques, and its main loop, once per turn, does work that grows with them:

- ``concurrent.futures.wait`` over every in-flight request's future, only to drop the
  finished ones (it takes and releases each future's lock twice);
- ``deque.remove`` of a connection from the keep-alive queue when its next request arrives,
  and of a finished future from the in-flight queue (a scan of each);
- the arbiter's heartbeat (a ``utime`` system call) and a take-and-put-back of the oldest
  keep-alive connection, every turn.

A turn serves about one request when a worker holds about as many connections as threads,
so that work is paid per request: a few percent of a bare request's CPU (``python -m
bench.api_loop``, figures on the benchmarks page). With more clients a turn serves several
requests and they share it. Here the work is constant per request:

=================================  ===========================================================
gunicorn's                         this loop's
=================================  ===========================================================
in-flight futures in a deque,      a set; the future's own done-callback removes it
dropped by ``futures.wait``
keep-alive connections in a        an ordered dict (insertion order is deadline order: the
deque, removed by a scan           keep-alive period is one constant); removed by key
the heartbeat every turn           at most every ``BEAT_SECONDS`` (the arbiter's timeout,
                                   ``speedtier api``'s 30 s, is far longer)
expired keep-alive connections     the oldest looked at without being taken out, unless expired
=================================  ===========================================================

What the worker does is gunicorn's: the same accept, the same hand-off of a readable
connection to the thread pool, the same keep-alive limit and timeout, the same refusal to
take more than ``worker_connections`` connections (it then waits for a request to finish),
the same graceful end (in-flight requests get ``graceful_timeout``).
"""

from __future__ import annotations

import errno
import threading
import time
from collections import OrderedDict
from concurrent import futures
from functools import partial
from selectors import EVENT_READ
from typing import Any

from gunicorn.workers.gthread import ThreadWorker

#: The longest the loop goes without telling the arbiter it is alive.
BEAT_SECONDS = 1.0


class LeanThreadWorker(ThreadWorker):  # type: ignore[misc]
    """gunicorn's gthread worker whose per-request bookkeeping does not grow with the
    number of connections it holds."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.futures: set[futures.Future[Any]] = set()
        self._keep: OrderedDict[Any, None] = OrderedDict()
        self._request_done = threading.Event()
        self._last_beat = 0.0

    def _wrap_future(self, fs: futures.Future[Any], conn: Any) -> None:
        fs.conn = conn  # type: ignore[attr-defined]
        self.futures.add(fs)
        fs.add_done_callback(self.finish_request)

    def on_client_socket_readable(self, conn: Any, client: Any) -> None:
        with self._lock:
            self.poller.unregister(client)
            if conn.initialized:
                try:
                    del self._keep[conn]
                except KeyError:  # murdered meanwhile (gunicorn's race)
                    return
        self.enqueue_req(conn)

    def murder_keepalived(self) -> None:
        now = time.time()
        while True:
            with self._lock:
                try:
                    conn = next(iter(self._keep))
                except StopIteration:
                    return
                if conn.timeout - now > 0:
                    return
                del self._keep[conn]
                self.nr_conns -= 1
                try:
                    self.poller.unregister(conn.sock)
                except OSError as exc:
                    if exc.errno != errno.EBADF:
                        raise
                except (KeyError, ValueError):  # already gone from the poller
                    pass
            conn.close()

    def finish_request(self, fs: futures.Future[Any]) -> None:
        self.futures.discard(fs)
        try:
            if fs.cancelled():
                self.nr_conns -= 1
                fs.conn.close()  # type: ignore[attr-defined]
                return
            try:
                keepalive, conn = fs.result()
                if keepalive and self.alive:
                    conn.sock.setblocking(False)
                    conn.set_timeout()
                    with self._lock:
                        self._keep[conn] = None
                        self.poller.register(
                            conn.sock, EVENT_READ, partial(self.on_client_socket_readable, conn)
                        )
                else:
                    self.nr_conns -= 1
                    conn.close()
            except Exception:  # the connection is closed, whatever went wrong
                self.nr_conns -= 1
                fs.conn.close()  # type: ignore[attr-defined]
        finally:
            self._request_done.set()

    def beat(self) -> None:
        """Tell the arbiter this worker is alive, at most every ``BEAT_SECONDS``."""
        now = time.monotonic()
        if now - self._last_beat >= BEAT_SECONDS:
            self._last_beat = now
            self.notify()

    def run(self) -> None:
        for sock in self.sockets:
            sock.setblocking(False)
            server = sock.getsockname()
            self.poller.register(sock, EVENT_READ, partial(self.accept, server))
        while self.alive:
            self.beat()
            if self.nr_conns < self.worker_connections:
                for key, _ in self.poller.select(1.0):
                    key.data(key.fileobj)
            else:  # no more connections: wait for a request to finish
                self._request_done.clear()
                if self.nr_conns >= self.worker_connections:
                    self._request_done.wait(1.0)
            if not self.is_parent_alive():
                break
            self.murder_keepalived()
        self.tpool.shutdown(False)
        self.poller.close()
        for sock in self.sockets:
            sock.close()
        futures.wait(list(self.futures), timeout=self.cfg.graceful_timeout)
