"""The process pool behind ``speedtier worker --processes N``: N identical children, kept at N.

==============================================  ===============================================
what happens                                    what the pool does
==============================================  ===============================================
a child exits while the pool runs (a crash,     logs it and starts a replacement after a backoff
an OOM kill, a SIGKILL, even a clean exit)      (1 s, doubled for every other restart in the
                                                window, at most 30 s)
more than ``max_restarts`` restarts within      SIGTERMs the other children, waits for them to
``window_seconds`` (a crash loop)               drain and exits 1, so Kubernetes restarts the
                                                pod (and its back-off and alerts take over)
SIGTERM or SIGINT to the pool                   forwards that signal to every child, restarts
                                                nothing more, waits for the children to drain
                                                (Kubernetes' grace period bounds the wait) and
                                                exits 0
==============================================  ===============================================

Signal handlers only record the signal; the pool's loop, woken at least every
``poll_seconds``, does the forwarding, so a child being started while a signal arrives is
signalled too.

Children are spawned (a fresh interpreter each), or, given ``preload``, forked from a server
process that imported those modules once (multiprocessing's ``forkserver``): a child then
starts with them imported, in milliseconds instead of the tenths of a second their imports
take, and a replacement as well. The server has one thread, so forking it is safe, and it
exits with the pool. :meth:`WorkerPool.prepare` starts it ahead of :meth:`WorkerPool.run`,
so its imports overlap whatever the caller does meanwhile, and as a fork of the caller
(``services.app.server_fork``), which skips a new interpreter's start.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass(frozen=True)
class RestartPolicy:
    """How the pool replaces children that die.

    Attributes:
      backoff_seconds: delay before the first restart in a quiet window.
      max_backoff_seconds: the delay doubles with every restart in the window up to this.
      max_restarts: restarts allowed within ``window_seconds``; one more death is a crash loop.
      window_seconds: how far back restarts count.
    """

    backoff_seconds: float = 1.0
    max_backoff_seconds: float = 30.0
    max_restarts: int = 5
    window_seconds: float = 60.0

    def delay(self, recent_restarts: int) -> float:
        """Seconds to wait before the next restart, given the restarts in the window."""
        return float(min(self.backoff_seconds * 2**recent_restarts, self.max_backoff_seconds))


class WorkerPool:
    """Run ``size`` spawned children of ``target(*args)``, restarting those that die.

    Parameters:
      target: the child's main function (importable: children are spawned).
      args: its arguments.
      size: how many children run at once.
      name: prefix of the children's names (``fast`` gives ``fast-0``, ``fast-1``...).
      policy: backoff and crash-loop limit.
      poll_seconds: how often the pool looks at signals and due restarts.
      healthy: pid -> whether that child is whole (its own heartbeat is recent); the pool
        calls ``on_beat`` only while every slot has a live, healthy child.
      on_beat: the pool's liveness heartbeat.
      on_exit: called with the pid of every child that exited (drops its metrics' live
        values).
      preload: modules a fork server imports for the children, which are then forked from
        it instead of spawned (empty: spawned).
    """

    def __init__(
        self,
        target: Callable[..., None],
        args: Sequence[Any],
        *,
        size: int,
        name: str,
        policy: RestartPolicy | None = None,
        poll_seconds: float = 0.2,
        healthy: Callable[[int], bool] | None = None,
        on_beat: Callable[[], None] | None = None,
        on_exit: Callable[[int], None] | None = None,
        preload: Sequence[str] = (),
    ) -> None:
        if size < 1:
            raise ValueError("a pool needs at least one child")
        self.target = target
        self.args = tuple(args)
        self.name = name
        self.policy = policy or RestartPolicy()
        self.poll_seconds = poll_seconds
        self.healthy = healthy
        self.on_beat = on_beat
        self.on_exit = on_exit
        self.children: list[BaseProcess | None] = [None] * size
        self.restarts = 0
        self.preload = tuple(preload)
        self._context: ForkServerContext | SpawnContext
        if self.preload:
            self._context = multiprocessing.get_context("forkserver")
            self._context.set_forkserver_preload(list(self.preload))
        else:
            self._context = multiprocessing.get_context("spawn")
        self._due: dict[int, float] = {}  # slot -> monotonic time of its restart
        self._recent: deque[float] = deque()  # monotonic times of recent restarts
        # Written by signal handlers: plain attributes only.
        self._received: list[int] = []

    def prepare(self) -> None:
        """Start the fork server now, if the children come from one: it imports ``preload``
        while the caller goes on (:meth:`run` starts it otherwise, and waits for it). The
        server is a fork of this process while it has one thread
        (``services.app.server_fork``), a new interpreter otherwise."""
        if self.preload:
            from multiprocessing import forkserver

            from services.app.server_fork import start_forked_server

            if not start_forked_server(self.preload):
                forkserver.ensure_running()

    def run(self) -> int:
        """Start the children and keep them running until a stop signal or a crash loop.

        Returns:
          0 after a SIGTERM/SIGINT (once every child has drained), 1 after a crash loop.
        """
        with self._recording_signals():
            for slot in range(len(self.children)):
                self._start(slot)
            forwarded = 0
            while not self._received:
                if self._reap():
                    log.error(
                        "%s: crash loop (a child died again after %d restarts within %.0f s); "
                        "stopping the other children and exiting with status 1",
                        self.name,
                        self.policy.max_restarts,
                        self.policy.window_seconds,
                    )
                    self._forward(signal.SIGTERM)
                    self._join_all()
                    return 1
                self._start_due()
                self._beat()
                self._sleep()
            while self._alive():
                while forwarded < len(self._received):
                    signum = self._received[forwarded]
                    log.info("%s: %s received; draining", self.name, signal.Signals(signum).name)
                    self._forward(signum)
                    forwarded += 1
                self._sleep()
            self._join_all()
            return 0

    # -- children ----------------------------------------------------------------------------

    def _start(self, slot: int) -> None:
        # The child runs with this process's environment as it is now (a fork server's is
        # the one it started with: marks set since, such as a warning already given, would
        # be missing).
        child = self._context.Process(
            target=_with_environment,
            args=(dict(os.environ), self.target, self.args),
            name=f"{self.name}-{slot}",
            daemon=False,
        )
        child.start()
        self.children[slot] = child
        log.info("%s: started %s (pid %s)", self.name, child.name, child.pid)

    def _reap(self) -> bool:
        """Schedule a restart for every child that exited; True on a crash loop."""
        now = time.monotonic()
        while self._recent and now - self._recent[0] > self.policy.window_seconds:
            self._recent.popleft()
        for slot, child in enumerate(self.children):
            if child is None or child.exitcode is None:
                continue
            self.children[slot] = None
            if self.on_exit is not None and child.pid is not None:
                self.on_exit(child.pid)
            if len(self._recent) >= self.policy.max_restarts:
                log.error("%s: %s (pid %s) died with %s", *self._death(child))
                return True
            delay = self.policy.delay(len(self._recent))
            self._recent.append(now)
            self._due[slot] = now + delay
            self.restarts += 1
            log.warning(
                "%s: %s (pid %s) died with %s; restarting it in %.1f s "
                "(restart %d of at most %d within %.0f s)",
                *self._death(child),
                delay,
                len(self._recent),
                self.policy.max_restarts,
                self.policy.window_seconds,
            )
        return False

    def _death(self, child: BaseProcess) -> tuple[str, str, int | None, str]:
        code = child.exitcode or 0
        status = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        return self.name, child.name, child.pid, status

    def _start_due(self) -> None:
        now = time.monotonic()
        for slot, due in list(self._due.items()):
            if due <= now:
                del self._due[slot]
                self._start(slot)

    def _beat(self) -> None:
        if self.on_beat is None:
            return
        live = self._alive()
        if len(live) < len(self.children):
            return
        if self.healthy is None or all(c.pid is not None and self.healthy(c.pid) for c in live):
            self.on_beat()

    def _alive(self) -> list[BaseProcess]:
        return [child for child in self.children if child is not None and child.is_alive()]

    def _forward(self, signum: int) -> None:
        for child in self._alive():
            if child.pid:
                # Either makes Dramatiq drain; SIGINT is what a terminal's Ctrl-C sends.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signum)

    def _join_all(self) -> None:
        for child in self.children:
            if child is not None:
                child.join()
                log.info("%s: %s (pid %s) exited with %s", *self._death(child))

    def _sleep(self) -> None:
        sentinels = [child.sentinel for child in self._alive()]
        if sentinels:
            wait(sentinels, timeout=self.poll_seconds)
        else:
            time.sleep(self.poll_seconds)

    @contextlib.contextmanager
    def _recording_signals(self) -> Iterator[None]:
        def record(signum: int, _frame: FrameType | None) -> None:
            self._received.append(signum)

        previous = {sig: signal.signal(sig, record) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _with_environment(
    environment: dict[str, str], target: Callable[..., object], args: tuple[object, ...]
) -> None:
    """A child's entry: the pool's environment over the fork server's, then ``target``."""
    os.environ.update(environment)
    target(*args)
