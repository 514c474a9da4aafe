"""The program's entry point: which command lines start a worker pool's server at once, and
that server started before the command line library loads (fresh interpreters, as a
starting program is; the pool's children forked from it run jobs in
``tests/e2e/test_worker_pool.py``, whose pool starts this way)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from services.app.entry import forks_a_pool, pool_options
from tests.fresh_process import printed_by


@pytest.mark.parametrize(
    "argv",
    [
        ["worker", "--tier", "fast", "--processes", "2", "--threads", "8"],
        ["worker", "--processes=4", "--threads=2", "--tier=slow", "--prefetch", "10"],
        ["worker", "--threads", "1", "--processes", "2"],
    ],
)
def test_a_pools_command_line_starts_its_server_at_once(argv: list[str]) -> None:
    assert forks_a_pool(argv)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["api"],
        ["worker", "--tier", "fast", "--processes", "1", "--threads", "8"],  # no pool
        ["worker", "--tier", "fast", "--processes", "2"],  # threads from the settings
        ["worker", "--tier", "fast", "--threads", "8"],  # processes from the settings
        ["worker", "--tier", "fast", "--processes", "two", "--threads", "8"],
        ["worker", "--tier", "fast", "--processes", "²", "--threads", "8"],
        ["worker", "--tier", "fast", "--processes", "2", "--threads", "0"],
        ["worker", "--tier", "fast", "--processes", "2", "--threads"],  # a value missing
        ["worker", "--processes", "2", "--processes", "3", "--threads", "8"],  # twice
        ["worker", "--tier", "fast", "--processes", "2", "--threads", "8", "--help"],
        ["--verbose", "worker", "--processes", "2", "--threads", "8"],
    ],
)
def test_any_other_command_line_goes_the_usual_way(argv: list[str]) -> None:
    assert not forks_a_pool(argv)


def test_the_options_are_read_as_the_command_reads_them() -> None:
    argv = ["worker", "--tier=fast", "--processes", "2", "--threads=8", "--prefetch", "0"]

    assert pool_options(argv) == {
        "--tier": "fast",
        "--processes": "2",
        "--threads": "8",
        "--prefetch": "0",
    }


def test_the_server_starts_before_click_loads_and_the_worker_command_uses_it() -> None:
    script = (
        "import multiprocessing, sys\n"
        "from multiprocessing import forkserver\n"
        "from services.app.entry import start_pool_server\n"
        "start_pool_server()\n"
        "server = forkserver._forkserver._forkserver_pid\n"
        "print(server is not None, 'click' in sys.modules)\n"
        # a child of the server says what the server had imported when it forked
        "reader, writer = multiprocessing.Pipe(duplex=False)\n"
        'code = \'import sys; w.send([m in sys.modules for m in ("click", "dramatiq")])\'\n'
        "child = multiprocessing.get_context('forkserver').Process(\n"
        "    target=exec, args=(code, {'w': writer}))\n"
        "child.start()\n"
        "print(*reader.recv())\n"
        "child.join()\n"
        "from services.app.worker_process import worker_pool\n"
        "worker_pool('fast', 2, 1, 0).prepare()\n"
        "print(forkserver._forkserver._forkserver_pid == server)\n"
    )

    # the server: started before click loaded, never loading it, its preload done (Dramatiq
    # in); the worker command's pool finds it running rather than starting another
    assert printed_by(script) == ["True", "False", "False", "True", "True"]


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:  # gone meanwhile
            continue
    return found


def test_a_server_started_for_a_command_line_the_command_refuses_exits_with_it() -> None:
    marker = f"no-such-tier-{uuid.uuid4().hex}"
    command = [sys.executable, "-m", "services.app.cli", "worker", "--tier", marker]
    done = subprocess.run(
        [*command, "--processes", "2", "--threads", "2"], capture_output=True, text=True
    )

    assert done.returncode == 2
    assert "Invalid value for '--tier'" in done.stderr
    deadline = time.monotonic() + 10  # the server notices once its imports are done
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_with(marker) == []
