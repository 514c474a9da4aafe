"""Script calls of many worker threads sent together: one round trip for all the calls that
arrived while the previous one was in flight (a group commit).

Two ways in. :class:`ScriptBatch` is for a call its thread waits for (a claim: the thread
runs the job only on its verdict): the first thread to arrive while nothing is in flight
sends its call at once (alone, it costs what a direct call costs); calls that arrive
meanwhile wait, and when the reply comes back the oldest waiting thread sends every waiting
call in one round trip. :class:`ScriptQueue` is for a call nobody waits for (a settle: the
thread goes on to its next job, and what must follow the settle is handed to the call's
``then``): one sender thread sends whatever was submitted while its previous round trip was
in flight. Each call is still its own script, applied atomically by Redis on its own:
batching changes how many round trips carry the calls, never what a call does. A round
trip is written straight onto a connection each of them keeps (``tiers.script_send``: packed
with hiredis, no pipeline and no pool hand-out per trip).

=========================================  ===============================================
what goes wrong                            what the caller sees
=========================================  ===============================================
Redis unreachable (connection, timeout)    waited-for calls: the error, in every thread of
                                           the batch; each retries its own call
                                           (``until_redis_answers``). Queued calls: the
                                           sender sends them again until Redis answers
Redis refuses writes (out of memory, a     queued calls: sent again until Redis takes
read-only replica)                         them, as while it is unreachable
Redis forgot the script (restart, flush)   nothing: the script is loaded and the calls it
                                           refused are sent again (only those: the others
                                           ran)
one call's script fails                    that call's error, in its thread (or ``then``)
                                           only
the sending thread interrupted (an async   its own error; the connection it sent on is
exception)                                 closed (replies may be on their way), and the
                                           other threads send their calls again. Redis
                                           may already have run them:
                                           a claim or settle run twice records the same
                                           outcome (the second sees its message active or
                                           superseded) and counts one more attempt
the process forks                          the child starts with no call of the parent's:
                                           those are the parent's to send and answer (its
                                           threads and sender do not run in the child);
                                           the child's calls go on senders of its own
=========================================  ===============================================
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis
from redis.commands.core import Script

from tiers.outage_log import OutageLog
from tiers.redis_retry import REDIS_DOWN, REDIS_REFUSING
from tiers.script_send import ScriptSender

log = logging.getLogger(__name__)

#: Errors a queued call waits out (sent again until Redis takes it): Redis unreachable, out
#: of memory, or a read-only replica. A settle refused for lack of memory is kept, not
#: dropped: its job's outcome would be lost while Dramatiq acked the message.
REDIS_WAIT = (*REDIS_DOWN, *REDIS_REFUSING)

#: The live batches and queues of this process, each started afresh in a forked child
#: (:func:`_start_afresh_in_child`).
_LIVE: weakref.WeakSet[ScriptBatch | ScriptQueue] = weakref.WeakSet()

#: The most calls one round trip carries (a batch holds one call per worker thread, so this
#: is reached only by processes with more threads).
MAX_BATCH = 256


class _Call:
    """One script call and, once sent, its reply or error."""

    __slots__ = ("answered", "args", "error", "lead", "name", "reply", "then", "waiting")

    def __init__(
        self, name: str, args: Sequence[Any], then: Callable[[Any, Exception | None], None] | None
    ) -> None:
        self.name = name
        self.args = args
        self.answered = False
        self.reply: Any = None
        self.error: BaseException | None = None
        #: What to do with the answer (a call nobody waits for); None: a thread waits.
        self.then = then
        #: Set when this call's thread is to send the waiting calls (its own among them).
        self.lead = False
        #: Held until the call is answered or its thread is to send (a waited-for call).
        self.waiting: threading.Lock | None = None
        if then is None:
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
        #: Sends each round trip on a connection it keeps (``tiers.script_send``).
        self.sender = ScriptSender(client)
        self._lock = threading.Lock()
        #: Calls waiting to be sent, oldest first; while ``_sending``, one thread sends.
        self._pending: list[_Call] = []
        self._sending = False
        _LIVE.add(self)

    def _start_afresh(self) -> None:
        """In a forked child: no call waiting, no thread sending (the parent's threads,
        whose calls these were, do not run here), a lock no parent's thread holds."""
        self._lock = threading.Lock()
        self._pending = []
        self._sending = False

    def close(self) -> None:
        """Close the kept connection (the next call opens another)."""
        self.sender.close()

    def call(self, name: str, args: Sequence[Any]) -> Any:
        """Run script ``name`` with ``args`` (in a round trip shared with other threads'
        calls) and return its reply."""
        call = _Call(name, args, None)
        with self._lock:
            self._pending.append(call)
            call.lead = not self._sending
            self._sending = True
        while not call.answered:
            if not call.lead:
                assert call.waiting is not None
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
            send_calls(self.sender, self.namespace, self.scripts, batch)
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
                if call is not own and call.answered and call.waiting is not None:
                    call.waiting.release()
            if following is not None:
                following.lead = True
                if following is not own and following.waiting is not None:
                    following.waiting.release()


class ScriptQueue:
    """Send script calls nobody waits for: a sender thread (started with the first call)
    carries every call submitted while its previous round trip was in flight in the next
    one, and hands each call's answer to the call's ``then`` (in the sender thread).

    While Redis is unreachable, out of memory or read-only the sender sends the same calls
    again (0.1 s doubling to 0.5 s between tries; the outage logged when it begins, every
    30 s while it lasts and when it ends); a call's own error goes to its ``then``.

    Parameters:
      client, namespace, scripts: as for :class:`ScriptBatch`.
      name: the sender thread's name.
      on_round_trip: called in the sender thread once a round trip's calls are answered,
        with the calls it carried, its seconds (from the first send to the last reply, the
        tries of an outage included) and the calls still unanswered then.
    """

    def __init__(
        self,
        client: redis.Redis,
        namespace: str,
        scripts: Mapping[str, Script],
        name: str,
        on_round_trip: Callable[[int, float, int], None] | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.scripts = scripts
        self.name = name
        self.on_round_trip = on_round_trip
        self.sender = ScriptSender(client)
        # Taken directly where nothing waits on it: ``Condition``'s own ``with`` adds two
        # Python calls to every submit.
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._pending: list[_Call] = []
        #: Calls submitted and not answered yet (the pending ones and the batch in flight).
        self._unanswered = 0
        self._idle = False
        #: The process whose sender thread runs (0: none runs): a thread started before a
        #: fork does not run in the child, and one that ended clears it. Cheaper to read at
        #: every submit than ``Thread.is_alive``.
        self._sending_in = 0
        #: Reports an outage once, not once per retry (only the sender thread uses it).
        self._outage = OutageLog(log, name, recovered_as="sent its calls again")
        _LIVE.add(self)

    def _start_afresh(self) -> None:
        """In a forked child: the parent's calls (submitted, in flight) are the parent's to
        send and answer, so the child forgets them, and its first call starts its sender."""
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._pending = []
        self._unanswered = 0
        self._idle = False
        self._sending_in = 0

    def submit(
        self, name: str, args: Sequence[Any], then: Callable[[Any, Exception | None], None]
    ) -> None:
        """Send script ``name`` with ``args`` soon; ``then(reply, None)`` or ``then(None,
        error)`` runs in the sender thread once Redis answered."""
        with self._lock:
            self._pending.append(_Call(name, args, then))
            self._unanswered += 1
            if self._sending_in != os.getpid():
                thread = threading.Thread(target=self._send_forever, name=self.name)
                thread.daemon = True
                thread.start()
                self._sending_in = os.getpid()
            elif self._idle:
                self._ready.notify()

    @property
    def unanswered(self) -> int:
        """Calls submitted and not answered yet (the pending ones and the trip in flight)."""
        return self._unanswered

    def close(self) -> None:
        """Close the kept connection (the next round trip opens another)."""
        self.sender.close()

    def flush(self, timeout: float) -> bool:
        """Wait until every call submitted so far is answered (a worker stopping); False
        when ``timeout`` seconds passed first."""
        deadline = time.monotonic() + timeout
        with self._ready:
            while self._unanswered:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._ready.wait(min(left, 0.1))
        return True

    def _send_forever(self) -> None:
        try:
            self._send_all()
        finally:
            with self._lock:
                self._sending_in = 0

    def _send_all(self) -> None:
        while True:
            with self._ready:
                while not self._pending:
                    self._idle = True
                    self._ready.wait()
                self._idle = False
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            began = time.monotonic()
            self._send_until_answered(batch)
            seconds = time.monotonic() - began
            for call in batch:
                assert call.then is not None
                error = call.error if isinstance(call.error, Exception) else None
                try:
                    call.then(call.reply, error)
                except Exception:
                    log.exception("handling the answer to a %s call failed", call.name)
            with self._ready:
                self._unanswered -= len(batch)
                left = self._unanswered
                if not left:
                    self._ready.notify_all()
            if self.on_round_trip is not None:
                try:
                    self.on_round_trip(len(batch), seconds, left)
                except Exception:
                    log.exception("recording a %s round trip failed", self.name)

    def _send_until_answered(self, batch: Sequence[_Call]) -> None:
        wait = 0.1
        while True:
            send_calls(self.sender, self.namespace, self.scripts, batch)
            down = [call for call in batch if isinstance(call.error, REDIS_WAIT)]
            if not down:
                self._outage.recovered()
                return
            self._outage.failed(
                f"could not send {len(down)} {batch[0].name} call(s)", down[0].error or Exception()
            )
            time.sleep(wait)
            wait = min(wait * 2, 0.5)
            for call in batch:
                call.answered, call.error = False, None


def _start_afresh_in_child() -> None:
    for each in list(_LIVE):
        each._start_afresh()


os.register_at_fork(after_in_child=_start_afresh_in_child)


def send_calls(
    sender: ScriptSender,
    namespace: str,
    scripts: Mapping[str, Script],
    batch: Sequence[_Call],
) -> None:
    """Answer every call of ``batch`` with its reply or its error (a failed round trip is
    the error of every call not answered before it), in one round trip (two when Redis
    forgot a script: ``ScriptSender.send_each``)."""

    def answer(index: int, reply: Any) -> None:
        if isinstance(reply, Exception):
            batch[index].answer(error=reply)
        else:
            batch[index].answer(reply)

    try:
        sender.send_each(namespace, [(scripts[call.name], call.args) for call in batch], answer)
    except Exception as exc:
        for call in batch:
            if not call.answered:
                call.answer(error=exc)
