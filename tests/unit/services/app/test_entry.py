"""The program's entry point: which command lines start a worker pool's server at once, and
that server started before the command line library loads (fresh interpreters, as a
starting program is; the pool's children forked from it run jobs in
``tests/e2e/test_worker_pool.py``, whose pool starts this way)."""

from __future__ import annotations

import os
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


def test_the_server_is_forked_before_this_process_loads_multiprocessing() -> None:
    script = (
        "import os, sys\n"
        "fork, loaded = os.fork, []\n"
        "def recording_fork():\n"
        "    loaded.append([m in sys.modules for m in ('multiprocessing', 'socket', 'click')])\n"
        "    return fork()\n"
        "os.fork = recording_fork\n"
        "from services.app.entry import start_pool_server\n"
        "start_pool_server()\n"
        "print(*loaded[0])\n"
        "from multiprocessing import forkserver\n"
        "address = forkserver._forkserver._forkserver_address\n"
        "print(address.startswith('\\0'), forkserver._forkserver._forkserver_pid is not None)\n"
    )

    # the fork came first; then this process took the server as multiprocessing's own
    assert printed_by(script) == ["False", "False", "False", "True", "True"]


def test_with_a_thread_running_the_server_is_left_to_the_worker_command() -> None:
    script = (
        "import threading\n"
        "stop = threading.Event()\n"
        "threading.Thread(target=stop.wait).start()\n"
        "from services.app.server_first import fork_server_first\n"
        "print(fork_server_first())\n"
        "stop.set()\n"
    )

    assert printed_by(script) == ["False"]


def test_the_childrens_metrics_directory_is_new_and_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.app import server_first

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "")  # unset, and restored after
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    server_first.share_metrics()
    made = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    assert made.parent == tmp_path and made.name.startswith("speedtier-metrics-")
    assert made.stat().st_mode & 0o777 == 0o700 and not any(made.iterdir())
    # a directory already given is kept
    server_first.share_metrics()
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(made)
