"""A run's start written to Redis before the run, its answer read after it.

``start.lua`` counts a run as started (the ``open`` mark that makes a crash countable) and
fences it. Waiting for its answer costs every run a round trip; not sending it before the
run loses the count when the run kills its process at once (the poison job that never ends).
Here each worker thread writes the start onto a connection of its own before the handler
runs, and reads the answer once the handler returned, before the run's settle is handed to
the settle sender: the start is in the kernel's send buffer, which outlives the process, so
Redis applies it even when the run kills its process; and it is applied before the settle,
which is sent only after its answer came.

A thread's connection carries one start at a time: an answer left unread (the run ended in
a way that never read it) is read, and dropped, before the thread's next start is written.
Any failure to write (Redis unreachable) says so, and the caller starts the run the usual
way; any failure to read closes the connection (an answer may still be on its way on it).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import ResponseError

from tiers.script_send import connect_kept, pack_commands, reopen_if_stale

FAILURES = (redis.ConnectionError, redis.TimeoutError, OSError)


class StartWire:
    """Per worker thread: one script call written now, its answer read later.

    Parameters:
      client: the Redis client whose pool makes each thread's connection.
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._local = threading.local()

    def write(self, script: Script, key: str, args: Sequence[Any]) -> bool:
        """Write one call of ``script`` (one key) on this thread's connection; False when it
        could not be written (nothing to read then)."""
        local = self._local
        connection = getattr(local, "connection", None)
        if connection is not None and local.unread:
            self._drop_unread()
            connection = getattr(local, "connection", None)
        if connection is None or connection.pid != os.getpid():
            connection = local.connection = self.client.connection_pool.make_connection()
        try:
            reopen_if_stale(connection)
            connect_kept(connection)
            command = ("EVALSHA", script.sha, 1, key, *args)
            connection.send_packed_command(pack_commands(connection, [command]))
        except FAILURES:
            connection.disconnect()
            local.unread = False
            return False
        local.unread = True
        return True

    def read(self) -> Any:
        """The answer to this thread's written call (a script's error reply, such as
        ``NoScriptError``, returned, not raised).

        Raises:
          redis.ConnectionError / redis.TimeoutError: no answer came (the call may or may
            not have run).
        """
        local = self._local
        connection = local.connection
        local.unread = False
        try:
            return connection.read_response()
        except ResponseError as error:
            return error
        except BaseException:
            connection.disconnect()
            raise

    def close(self) -> None:
        """Close this thread's connection (the next write opens another)."""
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.disconnect()
            self._local.connection = None
            self._local.unread = False

    def _drop_unread(self) -> None:
        with contextlib.suppress(*FAILURES):
            self.read()
