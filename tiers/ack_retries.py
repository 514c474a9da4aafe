"""Acks and nacks that met a lost connection, retried on a thread of their own.

Dramatiq's ``ConsumerThread.post_process_message`` retries an ack or nack that raised
``BrokerConnectionError`` by sleeping 5 s and trying again, in the thread that called it. A
settled run's ack runs in the job store's settle sender (``tiers.settling``), one thread
for every settle of the worker: one nack caught by a connection blip held every other
settle and ack of the worker for those seconds. Here the sender tries once; a failed try is
handed to this retrier, which tries again (0.1 s doubling to 0.5 s) without holding anyone
else, and the worker's stop waits for it (:meth:`AckRetries.flush`), as it waits for the
settles still on their way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from dramatiq.errors import BrokerConnectionError

from tiers.outage_log import OutageLog

log = logging.getLogger(__name__)

#: The longest wait between two tries of the same ack.
MAX_WAIT_SECONDS = 0.5


class AckRetries:
    """A queue of acks (or nacks) to try until Redis takes them, in one daemon thread
    started with the first.

    Parameters:
      name: the thread's name, and the subject of its outage warnings.
    """

    def __init__(self, name: str = "ack-retries") -> None:
        self.name = name
        self._pending: deque[Callable[[], None]] = deque()
        self._ready = threading.Condition(threading.Lock())
        #: Acks handed over and not done yet (the pending ones and the one being tried).
        self._unfinished = 0
        self._thread: threading.Thread | None = None
        self._outage = OutageLog(log, name, recovered_as="acked again")

    def submit(self, ack: Callable[[], None]) -> None:
        """Run ``ack`` (it raises ``BrokerConnectionError`` while Redis is unreachable) until
        it returns, in the retry thread."""
        with self._ready:
            self._pending.append(ack)
            self._unfinished += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._retry_forever, name=self.name)
                self._thread.daemon = True
                self._thread.start()
            self._ready.notify_all()

    def pending(self) -> int:
        """Acks handed over and not done yet."""
        with self._ready:
            return self._unfinished

    def flush(self, timeout: float) -> bool:
        """Wait until every ack handed over so far is done; False when ``timeout`` seconds
        passed first."""
        deadline = time.monotonic() + timeout
        with self._ready:
            while self._unfinished:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._ready.wait(min(left, 0.1))
        return True

    def _retry_forever(self) -> None:
        while True:
            with self._ready:
                while not self._pending:
                    self._ready.wait()
                ack = self._pending.popleft()
            wait = 0.1
            while True:
                time.sleep(wait)
                try:
                    ack()
                    break
                except BrokerConnectionError as exc:
                    self._outage.failed("could not ack a settled message", exc)
                    wait = min(wait * 2, MAX_WAIT_SECONDS)
                except Exception:
                    log.exception("acking a settled message failed")
                    break
            self._outage.recovered()
            with self._ready:
                self._unfinished -= 1
                self._ready.notify_all()
