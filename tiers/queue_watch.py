"""One look at all of a worker's idle queues, instead of each queue's consumer polling its own.

Dramatiq's consumer polls its queue every poll interval when it finds it empty; a worker
serves every queue of its tier (and each queue's delay queue), so an idle fast-tier worker
polling every 100 ms sent Redis about 240 round trips a second (7% of a core in the worker,
2.4% in Redis; at the default 500 ms, 48 and 2.4%; the maintenance tier more than twice
that), and a busy one went on paying for its idle queues (``python -m bench.idle_workers``).

Here a consumer that found its queue empty a few times in a row goes to sleep on its
queue's wake event, and one thread of the worker, every half poll interval, asks Redis in
one script call (``watch.lua``) how many messages each sleeping queue holds, and wakes the
consumers whose queue is not empty.

What the polls also did, the watch keeps doing:

- **the heartbeat**: each look gives the worker's heartbeat, as a fetch does, so a worker
  whose consumers all sleep is not taken for dead;
- **Dramatiq's maintenance** (a dead worker's messages of a queue back to it), which Dramatiq
  rides on a random share of each queue's fetches, runs on a schedule of its own
  (``tiers.dead_workers``), for sleeping queues and busy ones alike;
- **a wake within a poll**: a message pushed to a sleeping queue is seen by the next look,
  at most half a poll interval later (an idle queue's poll slept half to a whole interval);
  a settle that passes a freed group slot on sets the wake event at once, as before, and
  so does a due delayed job this worker moves back to its queue.

When a look fails (Redis unreachable) every sleeping consumer is woken and polls as before,
meeting the error in its own fetch (and its usual recovery). A consumer never sleeps longer
than ``SLEEP_POLLS`` poll intervals (at least 5 s), so a watch that stopped looking would
cost latency, not work; and the watch's thread is one of those the liveness probe checks.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from tiers.lua_scripts import load_script
from tiers.outage_log import OutageLog
from tiers.redis_values import now_ms
from tiers.script_send import ScriptSender

log = logging.getLogger(__name__)

#: Empty fetches in a row (Dramatiq's backoff after them: 5, 10, 20, 40 ms, each jittered up
#: to twice that) before the next empty one sends its consumer to sleep.
IDLE_FETCHES = 4
#: The longest a sleeping consumer waits, in poll intervals (and seconds, whichever is
#: longer), before it fetches on its own.
SLEEP_POLLS = 10
LONGEST_SLEEP_SECONDS = 5.0


class WatchedBroker(Protocol):
    """What the watch reads of its worker's broker (``tiers.broker.TierBroker``, whose
    consumers import this module): its Redis, key prefix and worker id."""

    client: Any
    namespace: str
    broker_id: str


class QueueWatch:
    """Watches the queues whose consumers sleep, for one worker (one broker).

    Parameters:
      broker: the worker's broker (its Redis, namespace and worker id).
      poll_ms: the worker's poll interval; the watch looks every half of it.
      sleep_polls: the longest a consumer sleeps, in poll intervals.
    """

    def __init__(self, broker: WatchedBroker, poll_ms: int, sleep_polls: int = SLEEP_POLLS) -> None:
        self.broker = broker
        self.interval = max(poll_ms, 2) / 2000
        self.longest_sleep = max(sleep_polls * poll_ms / 1000, LONGEST_SLEEP_SECONDS)
        self._script = broker.client.register_script(load_script("watch"))
        #: Each look is one script call written straight onto a connection the watch keeps
        #: (``tiers.script_send``), as the worker's other hot calls are: redis-py's way
        #: through ``execute_command`` and its pool costs a look more of the interpreter.
        self._sender = ScriptSender(broker.client)
        self._asleep: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._outage = OutageLog(log, "queue watch")
        self.thread = threading.Thread(target=self._run, name="queue-watch", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Stop looking (the worker's consumers have stopped) and wake any sleeper."""
        self._stop.set()
        self.thread.join(timeout=5)
        self._wake_all()
        self._sender.close()

    def sleep(self, queue_name: str, wake: threading.Event) -> bool:
        """Wait on ``wake`` until a look finds ``queue_name`` holding a message, something
        else sets it, or the longest sleep ends; True when it was set."""
        if self._stop.is_set():
            return wake.wait(self.interval)
        with self._lock:
            self._asleep[queue_name] = wake
        try:
            return wake.wait(self.longest_sleep)
        finally:
            with self._lock:
                if self._asleep.get(queue_name) is wake:
                    del self._asleep[queue_name]

    def asleep(self) -> list[str]:
        """The queues whose consumers sleep now."""
        with self._lock:
            return sorted(self._asleep)

    def look(self) -> list[str]:
        """One look: the heartbeat and a wake for each sleeping queue holding messages.
        Returns the queues woken."""
        with self._lock:
            asleep = dict(self._asleep)
        if not asleep:
            return []
        names = list(asleep)
        broker = self.broker
        args = [now_ms(), broker.broker_id, *names]
        [lengths] = self._sender.send(self._script, broker.namespace, [args])
        woken = [name for name, length in zip(names, lengths, strict=True) if int(length)]
        for name in woken:
            asleep[name].set()
        return woken

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.look()
                self._outage.recovered()
            except Exception as exc:  # the sleepers are woken: they poll, and meet it
                self._outage.failed("cannot look at the idle queues; they poll", exc)
                self._wake_all()

    def _wake_all(self) -> None:
        with self._lock:
            events = list(self._asleep.values())
        for event in events:
            event.set()
