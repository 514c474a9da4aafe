"""Two ``speedtier up`` on one machine, on the Redis that answers on 6379 and their own
databases: each keeps to a namespace of its own data directory (its own queues, its own
scheduler leader lock), the commands run from each folder find that ``up``'s services
through ``runtime.json``, and a second ``up`` from the same folder is refused."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
import redis
import requests

from shared import runtime_file
from testkit.ports import free_port
from tests.fixtures_db import create_database, drop_database
from tests.platform_harness import wait_until

REPO = Path(__file__).resolve().parents[2]
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
NAMESPACE = re.compile(r"key namespace '([^']+)'")


def base_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a command run from a checkout whose data directory is ``data_dir``:
    no Redis or PostgreSQL configured, nothing of the test run's own settings, and
    ``SPEEDTIER_ENV=development`` as a developer beside ``speedtier up`` sets it (unset means
    production)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SPEEDTIER_")
        and k not in ("REDIS_URL", "DATABASE_URL", "INTERNAL_API_TOKEN")
    }
    local = {"SPEEDTIER_DATA_DIR": str(data_dir), "SPEEDTIER_ENV": "development"}
    return env | local | {"PYTHONUNBUFFERED": "1", **extra}


def speedtier(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.app.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


class Up:
    """A running ``speedtier up --no-embedded`` and the lines it printed."""

    def __init__(self, data_dir: Path, database_url: str) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        env = base_env(
            data_dir,
            DATABASE_URL=database_url,
            SPEEDTIER_API_WORKERS="1",
            SPEEDTIER_FAST_PROCESSES="1",
            SPEEDTIER_WORKER_DRAIN_SECONDS="3",
            SPEEDTIER_WORKER_POLL_MS="100",
        )
        command = [sys.executable, "-m", "services.app.cli", "up", "--no-embedded"]
        self.process = subprocess.Popen(
            [*command, "--port", str(self.port)],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        assert self.process.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.process.stdout,))
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        with stream:
            for line in iter(stream.readline, ""):
                self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines[-60:])

    def wait_started(self) -> str:
        """Wait until the API answers; the Redis namespace ``up`` announced."""

        def answering() -> bool:
            assert self.process.poll() is None, self.output()
            try:
                return requests.get(f"{self.api}/healthz", timeout=5).status_code == 200
            except requests.RequestException:  # refused, or accepted while a worker boots
                return False

        wait_until(answering, timeout=120, interval=0.5)
        found = [m[1] for line in self.lines if (m := NAMESPACE.search(line))]
        assert found, self.output()
        return found[0]

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=10)


@pytest.fixture
def default_redis() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(DEFAULT_REDIS)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.skip("no Redis answers on 127.0.0.1:6379 (the shared one this test is about)")
    yield client
    client.close()


def enqueue_tick(up: Up, slot: str) -> str:
    body = {"requests": [{"kind": "tick:group-slot-reaper", "organization_id": None}]}
    body["requests"][0]["slot"] = slot
    response = requests.post(f"{up.api}/internal/jobs/enqueue", json=body, timeout=10)
    assert response.status_code == 202, response.text
    return str(response.json()["jobs"][0]["job_id"])


def job_state(up: Up, job_id: str) -> str | None:
    response = requests.get(f"{up.api}/internal/jobs/{job_id}", timeout=10)
    return None if response.status_code == 404 else str(response.json()["state"])


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_two_ups_on_one_redis_keep_apart_and_commands_find_their_up(
    default_redis: redis.Redis, tmp_path: Path
) -> None:
    # Given two checkouts (two data directories), each with its own database, and one Redis
    databases = [create_database("speedtier_up_a"), create_database("speedtier_up_b")]
    ups: list[Up] = []
    namespaces = [runtime_file.namespace_for(str(tmp_path / name)) for name in "ab"]
    try:
        # When each runs `speedtier up` with nothing configured but its database
        for name, database in zip("ab", databases, strict=True):
            ups.append(Up(tmp_path / name, database))

        # Then each uses its data directory's own namespace on the shared Redis
        assert [up.wait_started() for up in ups] == namespaces
        assert namespaces[0] != namespaces[1]
        # and each scheduler leads in its own namespace (not one leader for both)
        wait_until(
            lambda: all(default_redis.exists(f"{ns}:scheduler:leader") for ns in namespaces),
            timeout=60,
        )
        # and a job accepted by one API runs on that up's workers, unseen by the other
        job_a, job_b = enqueue_tick(ups[0], "from-a"), enqueue_tick(ups[1], "from-b")
        wait_until(lambda: job_state(ups[0], job_a) == "completed", timeout=60)
        wait_until(lambda: job_state(ups[1], job_b) == "completed", timeout=60)
        assert job_state(ups[1], job_a) is None and job_state(ups[0], job_b) is None

        # When `ready`, `db current` and `status` run from each folder with nothing exported,
        # Then they reach that up's Redis namespace and database
        for up, database, namespace in zip(ups, databases, namespaces, strict=True):
            env = base_env(up.data_dir)
            ready = speedtier("ready", env=env)
            assert ready.returncode == 0, ready.stderr
            assert "redis: ok" in ready.stdout and "postgresql: ok" in ready.stdout
            current = speedtier("db", "current", env=env)
            assert current.returncode == 0, current.stderr
            assert f"/{database.rsplit('/', 1)[1]}" in current.stdout
            assert "api2: " in current.stdout and "(up to date)" in current.stdout
            status = speedtier("status", env=env)
            assert status.returncode == 0, status.stderr
            assert "maintenance: 0 ready" in status.stdout
            assert namespace in speedtier_namespace(env)

        # and a folder with no up running gets the plain "not configured" answer
        alone = base_env(tmp_path / "nothing-running")
        assert speedtier("ready", env=alone).returncode == 1
        assert "DATABASE_URL is not set" in speedtier("db", "current", env=alone).stderr

        # When a second up starts from a folder whose up is running, Then it is refused
        again = speedtier(
            "up",
            "--no-embedded",
            "--port",
            str(free_port()),
            env=base_env(ups[0].data_dir, DATABASE_URL=databases[0]),
        )
        assert again.returncode == 1
        assert "another `speedtier up` is already running from" in again.stdout
        # and so is one from another folder that names the first one's namespace explicitly
        same_namespace = base_env(
            tmp_path / "c", DATABASE_URL=databases[1], SPEEDTIER_REDIS_NAMESPACE=namespaces[0]
        )
        third = speedtier("up", "--no-embedded", "--port", str(free_port()), env=same_namespace)
        assert third.returncode == 1
        assert f"already uses the Redis namespace '{namespaces[0]}'" in third.stdout
        assert str(ups[0].data_dir) in third.stdout
    finally:
        for up in ups:
            up.stop()
        for namespace in namespaces:
            keys = list(default_redis.scan_iter(match=f"{namespace}:*", count=1000))
            if keys:
                default_redis.delete(*keys)
        for database in databases:
            drop_database(database)
    for up in ups:
        assert up.process.returncode == 0, up.output()


def speedtier_namespace(env: dict[str, str]) -> str:
    """The Redis namespace a command run with ``env`` resolves to."""
    script = (
        "from shared.config import load_settings\n"
        "from shared.runtime_file import resolve\n"
        "print(resolve(load_settings()).redis_namespace)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()
