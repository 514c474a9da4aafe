"""ProcessGroup with small Python children: prefixed output, clean stop, kill, failure.

What ``speedtier up`` asks the group to start is checked without processes in
``tests/unit/services/app/cli/test_up.py``."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from services.app.supervisor import ProcessGroup, ProcessSpec

# A child that prints READY, then runs until SIGTERM, on which it says goodbye and exits 0.
POLITE = """
import signal, sys, time
def bye(signum, frame):
    print("got SIGTERM, bye", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
print("READY", flush=True)
while True:
    time.sleep(0.05)
"""

# A child that ignores SIGTERM.
STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("READY", flush=True)
while True:
    time.sleep(0.05)
"""


def python(name: str, code: str) -> ProcessSpec:
    return ProcessSpec(name, [sys.executable, "-c", code])


class Collector:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)

    def count(self, text: str) -> int:
        """How many lines end with ``text`` (a child's output line, not a command echo)."""
        with self._lock:
            return sum(line.endswith(text) for line in self.lines)


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def run_in_thread(group: ProcessGroup) -> tuple[threading.Thread, list[int]]:
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(group.wait()), daemon=True)
    thread.start()
    return thread, result


def test_output_is_prefixed_with_the_process_name() -> None:
    out = Collector()
    group = ProcessGroup(
        [python("alpha", POLITE), python("beta-long", POLITE)],
        grace_seconds=5,
        write=out,
        label="up",
    )
    group.start()
    thread, result = run_in_thread(group)

    wait_for(lambda: out.count("| READY") == 2)
    group.request_stop()
    thread.join(10)

    assert result == [0]
    assert "alpha     | READY" in out.lines
    assert "beta-long | READY" in out.lines
    assert "alpha     | got SIGTERM, bye" in out.lines
    assert any(line.startswith("up        | ") for line in out.lines)


def test_sigterm_to_the_supervisor_stops_every_child() -> None:
    out = Collector()
    group = ProcessGroup(
        [python("one", POLITE), python("two", POLITE)],
        grace_seconds=5,
        write=out,
        poll_seconds=0.02,
    )
    with group.handle_signals():
        group.start()
        wait_for(lambda: out.count("| READY") == 2)
        # Given both children are up, when the supervisor receives SIGTERM...
        os.kill(os.getpid(), signal.SIGTERM)
        code = group.wait()

    # ...then each child got SIGTERM, exited cleanly, and the group reports success.
    assert code == 0
    assert out.count("got SIGTERM, bye") == 2
    assert all(p.returncode == 0 for p in group.processes.values())
    assert any("received SIGTERM" in line for line in out.lines)


def test_a_child_ignoring_sigterm_is_killed_after_the_grace_period() -> None:
    out = Collector()
    group = ProcessGroup(
        [python("polite", POLITE), python("stubborn", STUBBORN)],
        grace_seconds=0.5,
        write=out,
        poll_seconds=0.02,
    )
    group.start()
    thread, result = run_in_thread(group)
    wait_for(lambda: out.count("| READY") == 2)

    started = time.monotonic()
    group.request_stop()
    thread.join(10)

    assert result == [0]
    assert 0.5 <= time.monotonic() - started < 5
    assert group.processes["polite"].returncode == 0
    assert group.processes["stubborn"].returncode == -signal.SIGKILL
    assert any("stubborn still running after 0.5s; sending SIGKILL" in line for line in out.lines)


def test_an_unexpected_exit_stops_the_group_with_its_status() -> None:
    out = Collector()
    crasher = python("crasher", "import sys, time; time.sleep(0.3); print('boom'); sys.exit(3)")
    group = ProcessGroup(
        [python("steady", POLITE), crasher], grace_seconds=5, write=out, poll_seconds=0.02
    )
    group.start()

    code = group.wait()

    assert code == 3
    assert group.failed == "crasher"
    assert group.processes["steady"].returncode == 0
    assert "steady  | got SIGTERM, bye" in out.lines
    assert any("crasher exited unexpectedly with exit status 3" in line for line in out.lines)


def test_a_clean_but_unexpected_exit_still_fails_the_group() -> None:
    group = ProcessGroup(
        [python("quitter", "print('done')")], grace_seconds=1, write=Collector(), poll_seconds=0.02
    )
    group.start()

    assert group.wait() == 1


def test_a_child_killed_by_a_signal_is_reported_with_the_shell_convention() -> None:
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    group = ProcessGroup(
        [python("victim", code)], grace_seconds=1, write=Collector(), poll_seconds=0.02
    )
    group.start()

    assert group.wait() == 128 + signal.SIGKILL


def test_grandchildren_are_killed_with_their_parent() -> None:
    # The child starts a grandchild (in its session), then dies on SIGTERM without waiting
    # for it: the group must not leave the grandchild running.
    parent = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([{sys.executable!r}, '-c', 'import time; time.sleep(60)'])\n"
        "print('GRANDCHILD', child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    out = Collector()
    group = ProcessGroup([python("parent", parent)], grace_seconds=2, write=out, poll_seconds=0.02)
    group.start()
    thread, _ = run_in_thread(group)
    wait_for(lambda: any("| GRANDCHILD " in line for line in out.lines))
    grandchild = int(next(line for line in out.lines if "| GRANDCHILD " in line).split()[-1])

    group.request_stop()
    thread.join(10)

    def gone() -> bool:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie waiting for its reaper has gone too
            with open(f"/proc/{grandchild}/stat") as stat:
                return stat.read().rpartition(")")[2].split()[0] == "Z"
        except FileNotFoundError:
            return True

    wait_for(gone, timeout=5)
