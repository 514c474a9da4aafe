"""The Ruby client (``clients/ruby``) against the real ``speedtier api``: its minitest suite
runs with Debian's ruby (``scripts/ensure-ruby.sh``, run by ``make services``) against an API
process on a migrated database and a Redis of its own, which the Ruby suite stops and starts
again to see the 503/Retry-After path. Without ruby the test skips locally and fails in CI."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import requests

from testkit.ports import free_port
from tests import REPO
from tests.fixtures_redis import redis_server_binary

CLIENT = REPO / "clients" / "ruby"
TOKEN = "ruby-client-token"


def ruby() -> str:
    found = shutil.which("ruby")
    probe = [found, "-e", 'require "minitest"'] if found else None
    usable = probe is not None and subprocess.run(probe, check=False).returncode == 0
    if not usable:
        if os.environ.get("CI"):
            pytest.fail("ruby with minitest is missing (scripts/ensure-ruby.sh installs it)")
        pytest.skip("ruby/minitest is not installed (make services installs it)")
    assert found is not None
    return found


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[str, int, Path]]:
    """A redis-server for the API alone (the Ruby suite shuts it down and starts it again)."""
    binary = redis_server_binary()
    assert binary is not None, "redis-server is needed"
    port, directory = free_port(), tmp_path / "redis"
    directory.mkdir()
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)]
    subprocess.Popen([*command, "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
    try:
        yield binary, port, directory
    finally:
        # (shutdown closes the connection it answers on; a stopped server refuses it)
        with contextlib.suppress(redis.RedisError):
            client.shutdown(nosave=True)
        client.close()


@pytest.fixture
def api(own_redis: tuple[str, int, Path], database_url: str) -> Iterator[str]:
    _binary, redis_port, _dir = own_redis
    port = free_port()
    env = {
        **os.environ,
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "DATABASE_URL": database_url,
        "SPEEDTIER_ENV": "test",
        "INTERNAL_API_TOKEN": TOKEN,
    }
    command = [
        sys.executable, "-m", "services.app.cli", "api",
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1", "--threads", "4",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if requests.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except requests.RequestException:  # not listening yet, or slow under load
                pass
            assert process.poll() is None, process.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the API did not start"
            time.sleep(0.1)
        yield url
    finally:
        process.send_signal(signal.SIGINT)  # gunicorn's quick shutdown: nothing left to drain
        process.communicate(timeout=40)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_ruby_client_suite_passes_against_the_real_api(
    api: str, own_redis: tuple[str, int, Path]
) -> None:
    binary, redis_port, directory = own_redis
    env = {
        **os.environ,
        "SPEEDTIER_API_URL": api,
        "SPEEDTIER_API_TOKEN": TOKEN,
        "SPEEDTIER_TEST_REDIS_SERVER": binary,
        "SPEEDTIER_TEST_REDIS_PORT": str(redis_port),
        "SPEEDTIER_TEST_REDIS_DIR": str(directory),
    }
    done = subprocess.run(
        [ruby(), "-w", "-Ilib", "-Itest", "test/run.rb"],
        cwd=CLIENT,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    summary = re.search(r"(\d+) runs, (\d+) assertions, 0 failures, 0 errors, 0 skips", output)
    assert summary, output[-3000:]
    assert int(summary.group(1)) >= 14, output[-3000:]
    assert "warning:" not in done.stderr, done.stderr[-3000:]
