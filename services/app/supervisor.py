"""Run a group of long-lived child processes the way foreman or honcho do.

Every child's output is printed line by line behind its name (``api       | ...``). The group
runs until a stop is requested (a signal, or :meth:`ProcessGroup.request_stop`) or a child
exits, which is always unexpected for long-lived processes. Stopping sends SIGTERM to each
child, waits up to the grace period for them to drain, then SIGKILLs what is left, with its
whole process group (a child's own subprocesses included).

Children run in their own sessions, so a Ctrl-C in the terminal reaches only the supervisor,
which then stops the children in order instead of every process at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import IO


@dataclass(frozen=True)
class ProcessSpec:
    """One child: its name (the output prefix), argv and, optionally, its full environment."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str] | None = None
    cwd: str | None = None


def _print_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class ProcessGroup:
    """Start, watch and stop a set of child processes as one unit.

    Parameters:
      specs: the children, started in this order.
      grace_seconds: how long children may take to exit after SIGTERM before SIGKILL.
      write: receives each output line, already prefixed; prints to stdout by default.
      label: the prefix of the group's own messages.
      poll_seconds: how often the group looks at its children and stop requests.
    """

    def __init__(
        self,
        specs: Sequence[ProcessSpec],
        *,
        grace_seconds: float,
        write: Callable[[str], None] = _print_line,
        label: str = "system",
        poll_seconds: float = 0.1,
    ) -> None:
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"process names must be unique: {names}")
        self.specs = list(specs)
        self.grace_seconds = grace_seconds
        self.label = label
        self.poll_seconds = poll_seconds
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.failed: str | None = None
        self._write = write
        self._write_lock = threading.Lock()
        self._width = max([len(label), *(len(name) for name in names)])
        self._readers: list[threading.Thread] = []
        # Written from signal handlers, so plain attributes only: no locks, no Event.
        self._stop_reason: str | None = None
        self._signals = 0

    # -- output --------------------------------------------------------------------------

    def emit(self, name: str, text: str) -> None:
        """Print ``text`` behind ``name``, one prefixed line per line of text."""
        with self._write_lock:
            for line in text.splitlines() or [""]:
                self._write(f"{name.ljust(self._width)} | {line}")

    def say(self, text: str) -> None:
        """Print one of the group's own messages."""
        self.emit(self.label, text)

    def _pump(self, name: str, stream: IO[bytes]) -> None:
        with stream:
            for raw in iter(stream.readline, b""):
                self.emit(name, raw.decode(errors="replace").rstrip("\r\n"))

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start every child, each with a thread copying its output."""
        for spec in self.specs:
            env = dict(os.environ if spec.env is None else spec.env)
            env.setdefault("PYTHONUNBUFFERED", "1")
            process = subprocess.Popen(
                list(spec.argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=spec.cwd,
                start_new_session=True,
            )
            self.processes[spec.name] = process
            assert process.stdout is not None
            reader = threading.Thread(
                target=self._pump,
                args=(spec.name, process.stdout),
                name=f"output-{spec.name}",
                daemon=True,
            )
            reader.start()
            self._readers.append(reader)
            self.say(f"started {spec.name} (pid {process.pid}): {' '.join(spec.argv)}")

    def request_stop(self, reason: str = "stop requested") -> None:
        """Ask :meth:`wait` to stop the group. Safe to call from a signal handler."""
        if self._stop_reason is None:
            self._stop_reason = reason
        self._signals += 1

    def wait(self) -> int:
        """Block until a stop is requested or a child exits, then stop the group.

        Returns:
          0 after a requested stop; otherwise the exit status of the child that ended the
          group (1 if that child exited with status 0, since none is expected to end).
        """
        try:
            while self._stop_reason is None:
                for name, process in self.processes.items():
                    code = process.poll()
                    if code is not None:
                        self.failed = name
                        self.say(f"{name} exited unexpectedly with {_describe_status(code)}")
                        self.request_stop(f"{name} exited")
                        break
                else:
                    time.sleep(self.poll_seconds)
            self.say(f"stopping ({self._stop_reason})")
        finally:
            self.stop()
        if self.failed is None:
            return 0
        code = self.processes[self.failed].returncode
        if code < 0:
            return 128 + -code  # the shell's convention for "killed by signal N"
        return code or 1

    def run(self) -> int:
        """Start the group and :meth:`wait` for it, SIGINT and SIGTERM requesting a stop."""
        with self.handle_signals():
            self.start()
            return self.wait()

    def stop(self) -> None:
        """SIGTERM every child, SIGKILL whatever still runs after the grace period."""
        running = {name: p for name, p in self.processes.items() if p.poll() is None}
        for name, process in running.items():
            self.say(f"sending SIGTERM to {name} (pid {process.pid})")
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        signals_before = self._signals
        deadline = time.monotonic() + self.grace_seconds
        while any(p.poll() is None for p in running.values()):
            if time.monotonic() >= deadline:
                break
            if self._signals > max(signals_before, 1):  # a second Ctrl-C: no more waiting
                self.say("stop requested again; killing now")
                break
            time.sleep(self.poll_seconds)
        for name, process in self.processes.items():
            if process.poll() is None:
                self.say(f"{name} still running after {self.grace_seconds:g}s; sending SIGKILL")
            # The whole session: also reaps what a child left behind, e.g. its own workers.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for reader in self._readers:
            reader.join(timeout=2.0)
        for name, process in running.items():
            self.say(f"{name} stopped ({_describe_status(process.returncode)})")

    @contextlib.contextmanager
    def handle_signals(self) -> Iterator[None]:
        """While inside, SIGINT and SIGTERM request a stop instead of interrupting."""

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.request_stop(f"received {signal.Signals(signum).name}")

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _describe_status(code: int) -> str:
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit status {code}"
