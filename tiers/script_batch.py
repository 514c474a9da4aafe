"""Script calls of many worker threads sent together: one round trip for all the calls that
arrived while the previous one was in flight (a group commit).

A worker thread that claims or settles a job hands its script call to the batch and waits
for its reply. The first thread to arrive while nothing is in flight sends the call at once
(alone, it costs what a direct call costs); calls that arrive meanwhile wait, and when the
reply comes back the oldest waiting thread sends every waiting call in one pipeline. Each
call is still its own script, applied atomically by Redis on its own: batching changes
how many round trips carry the calls, never what a call does.

=========================================  ===============================================
what goes wrong                            what each caller sees
=========================================  ===============================================
Redis unreachable (connection, timeout)    the error, in every thread of the batch; each
                                           retries its own call (``until_redis_answers``)
Redis forgot the script (restart, flush)   nothing: the script is loaded and the calls it
                                           refused are sent again (only those: the others
                                           ran)
one call's script fails                    that call's error, in its thread only
the sending thread interrupted (its own    its own error; the other threads send their
job's time limit, an async exception)      calls again. Redis may already have run them:
                                           a claim or settle run twice records the same
                                           outcome (the second sees its message active or
                                           superseded) and counts one more attempt
=========================================  ===============================================
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import redis
from redis.commands.core import Script

#: The most calls one round trip carries (a batch holds one call per worker thread, so this
#: is reached only by processes with more threads).
MAX_BATCH = 256


class _Call:
    """One thread's script call and, once sent, its reply or error."""

    __slots__ = ("answered", "args", "error", "lead", "name", "reply", "waiting")

    def __init__(self, name: str, args: Sequence[Any]) -> None:
        self.name = name
        self.args = args
        self.answered = False
        self.reply: Any = None
        self.error: BaseException | None = None
        #: Set when this call's thread is to send the waiting calls (its own among them).
        self.lead = False
        #: Held until the call is answered or its thread is to send.
        self.waiting = threading.Lock()
        self.waiting.acquire()

    def answer(self, reply: Any = None, error: BaseException | None = None) -> None:
        self.reply, self.error, self.answered = reply, error, True

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.reply


class ScriptBatch:
    """Send script calls of many threads in shared round trips.

    Parameters:
      client: the Redis client the scripts run on.
      namespace: the scripts' one key (the namespace, as every identity script takes).
      scripts: name -> registered script.
    """

    def __init__(self, client: redis.Redis, namespace: str, scripts: Mapping[str, Script]):
        self.client = client
        self.namespace = namespace
        self.scripts = scripts
        self._lock = threading.Lock()
        #: Calls waiting to be sent, oldest first; while ``_sending``, one thread sends.
        self._pending: list[_Call] = []
        self._sending = False

    def call(self, name: str, args: Sequence[Any]) -> Any:
        """Run script ``name`` with ``args`` (in a round trip shared with other threads'
        calls) and return its reply."""
        call = _Call(name, args)
        with self._lock:
            self._pending.append(call)
            call.lead = not self._sending
            self._sending = True
        while not call.answered:
            if not call.lead:
                call.waiting.acquire()
            if call.lead:
                call.lead = False
                self._send_pending(call)
        return call.outcome()

    def _send_pending(self, own: _Call) -> None:
        """Send the waiting calls (``own`` among them), then hand the sending on to the
        oldest call that arrived meanwhile, or stop sending."""
        with self._lock:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
        try:
            self._send(batch)
        except BaseException:
            # Interrupted while sending (not a Redis error: those are answers): this
            # thread's call fails with it; the other unanswered calls go back to the front
            # of the queue, for the next sender.
            with self._lock:
                self._pending[:0] = [c for c in batch if c is not own and not c.answered]
            raise
        finally:
            with self._lock:
                following = self._pending[0] if self._pending else None
                self._sending = following is not None
            for call in batch:
                if call is not own and call.answered:
                    call.waiting.release()
            if following is not None:
                following.lead = True
                if following is not own:
                    following.waiting.release()

    def _send(self, batch: Sequence[_Call]) -> None:
        """Answer every call of ``batch`` with its reply or its error (a failed round trip
        is every call's error)."""
        try:
            if len(batch) == 1:
                self._send_one(batch[0])
            else:
                self._send_many(batch)
        except Exception as exc:
            for call in batch:
                if not call.answered:
                    call.answer(error=exc)

    def _send_one(self, call: _Call) -> None:
        try:
            reply = self.scripts[call.name](keys=[self.namespace], args=call.args)
        except redis.ResponseError as exc:
            call.answer(error=exc)
        else:
            call.answer(reply)

    def _send_many(self, batch: Sequence[_Call]) -> None:
        """One pipeline of EVALSHA calls; the calls Redis refused for not knowing their
        script (a restart or flush) are sent again once it is loaded."""
        unanswered = list(batch)
        for attempt in (1, 2):
            pipe = self.client.pipeline(transaction=False)
            for call in unanswered:
                pipe.evalsha(self.scripts[call.name].sha, 1, self.namespace, *call.args)
            replies = pipe.execute(raise_on_error=False)
            refused: list[_Call] = []
            for call, reply in zip(unanswered, replies, strict=True):
                if isinstance(reply, redis.exceptions.NoScriptError) and attempt == 1:
                    refused.append(call)
                elif isinstance(reply, Exception):
                    call.answer(error=reply)
                else:
                    call.answer(reply)
            if not refused:
                return
            for name in {call.name for call in refused}:
                self.client.script_load(self.scripts[name].script)
            unanswered = refused
