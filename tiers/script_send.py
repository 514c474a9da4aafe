"""Script calls written straight onto a connection: the hot path of enqueues, and of a
worker's fetches, claims and settles (``tiers.script_batch``, ``TierBroker._dispatch``).

A single enqueue is one EVALSHA, and redis-py's way there cost the client more CPU than the
enqueue's own work: ``execute_command`` (retry wrapper, timing and metrics hooks, response
callbacks) or a pipeline's command stack, and the pool's hand-out and return of a connection
(locks, four metric updates, an event). Here the calls are packed once, written in one send
and their replies read in order, on a connection the sender keeps for itself, checked before
each use as the pool checks the connections it hands out. The sender keeps as many as its
threads have sent on at once, up to :data:`KEEP_AT_MOST`: a thread takes one that is idle,
or opens another to keep, and puts it back after its round trip (one list's ``pop`` and
``append``, where the pool's hand-out and return cost several times as much); past that
many at once, a thread takes one of the client's pool.

=========================================  ===============================================
what goes wrong                            what happens
=========================================  ===============================================
Redis unreachable (connection, timeout)    the connection's own ``Retry``, as redis-py
                                           does (none in a pool made from a URL, as
                                           Dramatiq's): disconnect, wait, send every
                                           call again; when retries run out the error
                                           reaches the caller. A resend is harmless:
                                           the identity script deduplicates
Redis took the calls and did not answer    :class:`OutcomeUnknown` (a ``redis.TimeoutError``
(a timeout or a lost connection after      and ``redis.ConnectionError``): the calls may or
the send)                                  may not have run; an error before anything was
                                           sent (connection refused) stays as it was
Redis out of memory (``maxmemory`` with    ``redis.exceptions.OutOfMemoryError``; an atomic
``noeviction``)                            send (``MULTI``/``EXEC``) ran none of its calls
Redis forgot the script (restart, flush)   it is loaded and only the calls it refused are
                                           sent again (the others ran; their replies stay)
one call's script fails                    every reply is read first (the connection stays
                                           clean), then the first error is raised
the thread interrupted between sending     the kept connection is closed (replies may be
and reading (an async exception)           pending on it) before it goes back, and opened
                                           again by its next use
Redis closed the kept connection (a        seen before the send, as the pool sees it:
restart, an idle timeout)                  the connection is opened again
the process forked                         the child opens connections of its own and
                                           leaves the parent's alone
:meth:`ScriptSender.close` while a thread  its connection is closed when it comes back
is sending
=========================================  ===============================================
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import redis
from hiredis import pack_command
from redis.commands.core import Script
from redis.connection import HiredisRespSerializer
from redis.exceptions import NoScriptError, ResponseError

from shared.errors import SpeedtierError


class OutcomeUnknown(SpeedtierError, redis.ConnectionError, redis.TimeoutError):
    """The calls were sent and Redis did not answer (a timeout, a connection lost while
    waiting): they may or may not have run. A ``redis.ConnectionError`` and a
    ``redis.TimeoutError``, so every caller that retries on those keeps doing so."""


#: Connections a sender keeps at most (an API worker's threads, a worker's consumers, and the
#: handler threads enqueueing at one moment); more threads sending at once use the pool.
KEEP_AT_MOST = 8


class ScriptSender:
    """Sends script calls for ``client`` (which must not decode replies, like Dramatiq's)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        #: The connections this sender keeps (``redis.Connection``s the client's pool made,
        #: never handed out by it) that no thread is using now. ``list.pop`` and
        #: ``list.append`` are atomic: threads take and give back without a lock.
        self._idle: list[Any] = []
        #: The connections kept, idle or in use (changed under ``_lock``).
        self._kept = 0
        #: Bumped by :meth:`close`: a connection taken before is closed when it comes back.
        self._generation = 0
        self._lock = threading.Lock()
        #: The process the connections and the lock belong to (a forked child starts anew).
        self._pid = os.getpid()

    def send(
        self, script: Script, key: str, calls: Sequence[Sequence[Any]], *, atomic: bool = False
    ) -> list[Any]:
        """Run ``script`` once per argument list of ``calls`` (one key, ``key``), in one
        round trip; the replies in call order. With ``atomic`` the calls go in one
        ``MULTI``/``EXEC``: Redis runs all of them or, when it refuses one as they are
        queued (out of memory), none.

        Raises:
          OutcomeUnknown: the calls were sent and Redis did not answer.
          redis.ConnectionError / redis.TimeoutError: Redis could not be reached (retries
            spent); nothing was sent.
          redis.ResponseError: a call's script failed (the first such error).
        """
        replies: list[Any] = [None] * len(calls)
        self.send_each(key, [(script, args) for args in calls], replies.__setitem__, atomic=atomic)
        for reply in replies:
            if isinstance(reply, ResponseError):
                raise reply
        return replies

    def send_each(
        self,
        key: str,
        calls: Sequence[tuple[Script, Sequence[Any]]],
        answer: Callable[[int, Any], None],
        *,
        atomic: bool = False,
    ) -> None:
        """Run each ``(script, args)`` of ``calls`` (one key, ``key``) in one round trip
        (two when Redis forgot a script) and hand ``answer(index, reply)`` each call's reply,
        or its ``redis.ResponseError`` (not raised), as soon as it is final: the calls
        answered before an error (Redis unreachable on the resend of refused calls) are
        known to have run.

        Raises:
          redis.ConnectionError / redis.TimeoutError: Redis did not answer (retries spent).
        """
        pending: Sequence[int] = range(len(calls))
        for attempt in (1, 2):
            commands = [("EVALSHA", calls[i][0].sha, 1, key, *calls[i][1]) for i in pending]
            answers = self._transaction(commands) if atomic else self._round_trip(commands)
            refused: list[int] = []
            for index, reply in zip(pending, answers, strict=True):
                if attempt == 1 and isinstance(reply, NoScriptError):
                    refused.append(index)
                else:
                    answer(index, reply)
            if not refused:
                return
            for script in {id(calls[i][0]): calls[i][0] for i in refused}.values():
                self.client.script_load(script.script)
            pending = refused

    def close(self) -> None:
        """Close the kept connections (the next call opens another); one in use is closed
        when its thread gives it back."""
        with self._lock:
            self._generation += 1
            self._kept = 0
            while self._idle:
                try:
                    self._idle.pop().disconnect()
                except IndexError:  # taken by a sending thread meanwhile
                    break

    def _transaction(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """``commands`` in one ``MULTI``/``EXEC``: their replies, or, when Redis refused one
        as it was queued (``EXECABORT``: none ran), that refusal in the place of each."""
        answers = self._round_trip([("MULTI",), *commands, ("EXEC",)])
        executed = answers[-1]
        if not isinstance(executed, Exception):
            return list(executed)
        refusal = next((a for a in answers[:-1] if isinstance(a, Exception)), executed)
        return [refusal] * len(commands)

    def _round_trip(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Every command's reply (an error reply in its place, not raised)."""
        if self.client.connection is not None:  # a single-connection client: its own lock
            pipe = self.client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)  # type: ignore[no-untyped-call]
            return list(pipe.execute(raise_on_error=False))
        generation = self._generation
        connection = self._take()
        if connection is None:
            return self._through_pool(commands)
        try:
            reopen_if_stale(connection)
            return _send_and_read(connection, commands)
        except BaseException:
            connection.disconnect()  # never kept with its replies still on their way
            raise
        finally:
            self._give_back(connection, generation)

    def _give_back(self, connection: Any, generation: int) -> None:
        """Keep ``connection`` for the next call, unless :meth:`close` ran since it was taken
        (at ``generation``) or while it was being put back: then close it."""
        if generation == self._generation:
            self._idle.append(connection)
            if generation == self._generation:
                return
            try:  # closed just as it came back: close may have missed it
                self._idle.remove(connection)
            except ValueError:  # close took it
                return
        connection.disconnect()

    def _take(self) -> Any | None:
        """An idle kept connection of this process, a new one to keep, or None when
        :data:`KEEP_AT_MOST` are kept and in use."""
        pid = os.getpid()
        if self._pid != pid:
            # Forked: the connections are the parent's (their sockets left to it), and so is
            # the lock, which a parent's thread may have held at the fork.
            self._idle, self._kept, self._lock, self._pid = [], 0, threading.Lock(), pid
        try:
            return self._idle.pop()
        except IndexError:
            pass
        with self._lock:
            if self._kept >= KEEP_AT_MOST:
                return None
            self._kept += 1
        return self.client.connection_pool.make_connection()

    def _through_pool(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Every command's reply, on a connection of the client's pool."""
        pool = self.client.connection_pool
        connection = pool.get_connection()
        try:
            return _send_and_read(connection, commands)
        except BaseException:
            # Never back in the pool with replies on their way.
            connection.disconnect()  # type: ignore[no-untyped-call]
            raise
        finally:
            pool.release(connection)


def reopen_if_stale(connection: Any) -> None:
    """Close a kept connection that has something to read before anything was sent (Redis
    closed it: a restart, an idle timeout, ``CLIENT KILL``), as the pool checks the
    connections it hands out; the send opens it again."""
    try:
        stale = connection.can_read()
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        stale = True
    if stale:
        connection.disconnect()


def _send_and_read(connection: Any, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Send ``commands`` and read their replies, under the connection's retry.

    Raises:
      OutcomeUnknown: the last try failed after its commands were (perhaps partly) sent.
    """
    sent = False

    def attempt() -> list[Any]:
        nonlocal sent
        sent = False
        connect_kept(connection)  # a refusal here sent nothing
        sent = True
        connection.send_packed_command(pack_commands(connection, commands))
        answers: list[Any] = []
        for _ in commands:
            try:
                answers.append(connection.read_response())
            except ResponseError as error:
                answers.append(error)
        return answers

    try:
        answers: list[Any] = connection.retry.call_with_retry(
            attempt, lambda _error: connection.disconnect()
        )
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        if sent and not isinstance(exc, OutcomeUnknown):
            raise OutcomeUnknown(f"sent, then no answer: {exc}") from exc
        raise
    return answers


def connect_kept(connection: Any) -> None:
    """Open ``connection`` when it is not open, as its ``send_packed_command`` would (no
    health check)."""
    opening = getattr(connection, "connect_check_health", None)
    if opening is None:
        connection.connect()
    elif not getattr(connection, "_sock", None):
        opening(check_health=False)


def pack_commands(connection: Any, commands: Sequence[Sequence[Any]]) -> list[bytes]:
    """The commands in the protocol, as ``send_packed_command`` takes them. redis-py's
    hiredis packer hands each command to ``hiredis.pack_command`` after checks these
    commands never need (a first word with spaces, buffers); called directly, the bytes are
    the same."""
    if type(getattr(connection, "_command_packer", None)) is HiredisRespSerializer:
        return [b"".join([pack_command(tuple(command)) for command in commands])]
    packed: list[bytes] = connection.pack_commands(commands)
    return packed
