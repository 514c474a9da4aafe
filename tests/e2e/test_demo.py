"""``make run`` ends in the ingestion service working: ``speedtier up --demo``
on the embedded Redis and PostgreSQL (a fresh data directory, free ports) ingests the
sample knowledge base through the real API, answers searches, and stops cleanly on Ctrl-C.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from services.app.demo.run import QUERIES
from testkit.ports import free_port

REPO = Path(__file__).resolve().parents[2]
DEMO_DEADLINE_SECONDS = 90.0
SAMPLE_DOCUMENTS = 14  # 6 files and 8 published pages (robots.txt keeps the draft out)


def read_lines(stream: IO[str], into: queue.Queue[str]) -> None:
    for line in iter(stream.readline, ""):
        into.put(line.rstrip("\n"))


class Output:
    """The lines ``up`` printed so far, read from its stdout by a thread."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=read_lines, args=(process.stdout, self._queue), daemon=True).start()

    def wait_for(self, pattern: str, deadline: float) -> str:
        """The first line (old or new) matching ``pattern``; fails at ``deadline``."""
        compiled = re.compile(pattern)
        for line in self.lines:
            if compiled.search(line):
                return line
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            self.lines.append(line)
            if compiled.search(line):
                return line
        tail = "\n".join(self.lines[-60:])
        pytest.fail(f"no line matching {pattern!r} in time; last output:\n{tail}")

    def drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                self.lines.append(self._queue.get(timeout=0.2))
            except queue.Empty:
                return

    def demo_lines(self) -> list[str]:
        return [line.split("|", 1)[1].strip() for line in self.lines if line.startswith("demo ")]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_up_demo_ingests_the_sample_knowledge_base_and_answers_searches(
    embedded_tmp_path: Path,
) -> None:
    # Given a fresh data directory and free ports, nothing configured
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("REDIS_URL", "DATABASE_URL", "SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS")
    }
    env |= {
        "SPEEDTIER_DATA_DIR": str(embedded_tmp_path / "data"),
        "SPEEDTIER_API_WORKERS": "1",
        "SPEEDTIER_FAST_PROCESSES": "1",
        "SPEEDTIER_WORKER_DRAIN_SECONDS": "5",
        "PYTHONUNBUFFERED": "1",
    }
    port = free_port()
    started = time.monotonic()
    # When `speedtier up --demo --embedded` runs
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.app.cli",
            "up",
            "--embedded",
            "--demo",
            "--port",
            str(port),
        ],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = Output(process)
    try:
        deadline = started + DEMO_DEADLINE_SECONDS
        output.wait_for(r"SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS=true", deadline)
        done = output.wait_for(r"^demo\s+\| (demo done|demo failed)", deadline)
        demo_seconds = time.monotonic() - started
        # Then every sample document ended ready, with progress shown on the way
        lines = output.demo_lines()
        assert "demo done" in done, "\n".join(lines)
        assert f"ingested {SAMPLE_DOCUMENTS}/{SAMPLE_DOCUMENTS} ready, 0 failed" in "\n".join(lines)
        assert any(re.match(r"ingested \d+/14 ready, 0 failed$", line) for line in lines)
        assert "robots.txt disallows /drafts/roadmap.html: not added" in lines
        # and each search was answered with hits naming the expected documents
        for query in QUERIES:
            header = next(line for line in lines if line.startswith(f'search "{query}"'))
            hits = lines[lines.index(header) + 1 : lines.index(header) + 4]
            assert re.match(r'search ".*": 3 hits', header), header
            assert all(re.match(r"\d\. \d\.\d{4}  \S+  \"", hit) for hit in hits), hits
        reset_hits = lines[lines.index('search "factory reset": 3 hits') + 1 :][:3]
        assert any("website/troubleshooting.html" in hit for hit in reset_hits), reset_hits
        # When Ctrl-C reaches it, Then everything stops cleanly
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=60)
        output.drain(2)
        assert code == 0, "\n".join(output.lines[-40:])
        for server in ("postgres", "redis"):
            assert any(f"embedded {server} stopped" in line for line in output.lines), server
        print(f"demo finished {demo_seconds:.1f} s after start")
    finally:
        stop(process)


def stop(process: subprocess.Popen[str]) -> None:
    """Ctrl-C, so `up` stops its children and embedded servers; a kill only as a last resort."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
