"""One ``speedtier up`` per Redis namespace.

Two ``up`` runs on one Redis namespace would consume each other's jobs (and run them against
the other's database) and share one scheduler leader lock. Each data directory gets its own
namespace by default (:func:`shared.runtime_file.namespace_for`), so this can only happen when
``SPEEDTIER_REDIS_NAMESPACE`` names the same one twice; the claim turns that into a refusal.

The claim is the key ``<ns>:up:owner`` (who holds it: pid, host, data directory), set with
``NX`` and a lifetime of :data:`CLAIM_SECONDS`, renewed every third of it by a thread while
``up`` runs and deleted when it stops; a killed ``up``'s claim expires on its own.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid
from pathlib import Path

import redis

from shared.errors import SpeedtierError

CLAIM_SECONDS = 30.0
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end"
_RENEW = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
)


class NamespaceTaken(SpeedtierError, RuntimeError):
    """Another ``speedtier up`` holds this Redis namespace."""


class NamespaceClaim:
    """Hold ``<namespace>:up:owner`` for this process while ``up`` runs."""

    def __init__(self, redis_url: str, namespace: str, data_dir: str) -> None:
        self.key = f"{namespace}:up:owner"
        self.namespace = namespace
        self.value = json.dumps(
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "data_dir": str(Path(data_dir).expanduser().resolve()),
                "token": uuid.uuid4().hex,
            }
        )
        self._client = redis.Redis.from_url(redis_url, socket_timeout=5)
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def acquire(self) -> None:
        """Take the claim and keep it alive.

        Raises:
          NamespaceTaken: another ``up`` holds it; the message names it and what to change.
        """
        lifetime_ms = int(CLAIM_SECONDS * 1000)
        if not self._client.set(self.key, self.value, nx=True, px=lifetime_ms):
            raw = self._client.get(self.key)
            holder = json.loads(raw) if raw else {}
            self._client.close()
            raise NamespaceTaken(
                f"another `speedtier up` (pid {holder.get('pid')} on {holder.get('host')}, data "
                f"directory {holder.get('data_dir')}) already uses the Redis namespace "
                f"{self.namespace!r} on this Redis: its workers would run this one's jobs against "
                "its own database. Unset SPEEDTIER_REDIS_NAMESPACE (each data directory then gets "
                "its own) or set a different one; a killed run's claim expires within "
                f"{CLAIM_SECONDS:.0f} s"
            )
        self._renewer = threading.Thread(target=self._renew, name="namespace-claim", daemon=True)
        self._renewer.start()

    def release(self) -> None:
        """Stop renewing and delete the claim if it is still ours. Safe to call twice."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
            self._renewer = None
        try:
            self._client.eval(_RELEASE, 1, self.key, self.value)
        except redis.RedisError:
            pass  # it expires on its own
        finally:
            self._client.close()

    def _renew(self) -> None:
        lifetime_ms = int(CLAIM_SECONDS * 1000)
        while not self._stop.wait(CLAIM_SECONDS / 3):
            try:
                self._client.eval(_RENEW, 1, self.key, self.value, lifetime_ms)
            except redis.RedisError:
                continue  # Redis blipped; the next round tries again before the claim lapses
