"""The start-up check of Redis persistence, against real redis-server processes started with
and without AOF (and one with CONFIG disabled, as managed Redis services do)."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shared.config import Settings, load_settings
from shared.redis_persistence import WARNED_ENV, VolatileRedis, verify_redis_persistence
from testkit.ports import free_port
from tests import REPO
from tests.fixtures_platform import CREDENTIALS_KEY, TOKEN
from tests.fixtures_redis import MakeRedisServer

StartRedis = MakeRedisServer

pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs redis-server on PATH"
)


def settings_of(**values: object) -> Settings:
    """Settings as production reads them (which requires a credentials key)."""
    return load_settings(connector_credentials_key=CREDENTIALS_KEY, **values)


@pytest.fixture
def start_redis(make_redis_server: MakeRedisServer) -> StartRedis:
    """Start a redis-server with the given extra arguments; its URL. Stopped afterwards."""
    return make_redis_server


@pytest.fixture(autouse=True)
def not_warned_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WARNED_ENV, raising=False)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "shared.redis_persistence" and r.levelno == logging.WARNING
    ]


@pytest.mark.parametrize("environment", ["production", "staging"])
def test_production_and_staging_refuse_a_redis_without_aof(
    start_redis: StartRedis, environment: str
) -> None:
    url = start_redis("--appendonly", "no")
    settings = settings_of(redis_url=url, environment=environment)

    with pytest.raises(VolatileRedis) as refused:
        verify_redis_persistence(settings)

    message = str(refused.value)
    assert f"refusing to start in SPEEDTIER_ENV={environment}" in message
    assert "appendonly=no" in message and "appendfsync everysec" in message
    assert "SPEEDTIER_ALLOW_VOLATILE_REDIS=1" in message


def test_a_tier_redis_without_aof_is_refused_too(start_redis: StartRedis) -> None:
    # Given a durable control Redis and a slow tier on a Redis of its own without AOF
    control = start_redis("--appendonly", "yes", "--appendfsync", "everysec")
    slow = start_redis("--appendonly", "no")
    settings = settings_of(redis_url=control, slow_redis_url=slow, environment="production")

    # Then production refuses, naming the tier's Redis
    with pytest.raises(VolatileRedis) as refused:
        verify_redis_persistence(settings)
    port = slow.rsplit(":", 1)[1].split("/")[0]
    assert f":{port}" in str(refused.value) and "appendonly=no" in str(refused.value)


def test_the_override_starts_with_a_warning(
    start_redis: StartRedis, caplog: pytest.LogCaptureFixture
) -> None:
    url = start_redis("--appendonly", "no")
    settings = settings_of(redis_url=url, environment="production", allow_volatile_redis=True)

    found = verify_redis_persistence(settings)

    assert found is not None and found.appendonly is False
    assert any("allowed by SPEEDTIER_ALLOW_VOLATILE_REDIS" in w for w in warnings_of(caplog))


@pytest.mark.parametrize("fsync", ["everysec", "always"])
def test_aof_with_a_bounded_fsync_passes_silently(
    start_redis: StartRedis, caplog: pytest.LogCaptureFixture, fsync: str
) -> None:
    url = start_redis("--appendonly", "yes", "--appendfsync", fsync)

    found = verify_redis_persistence(settings_of(redis_url=url, environment="production"))

    assert found is not None and (found.appendonly, found.appendfsync) == (True, fsync)
    assert warnings_of(caplog) == []


def test_aof_left_to_the_os_starts_with_a_warning(
    start_redis: StartRedis, caplog: pytest.LogCaptureFixture
) -> None:
    url = start_redis("--appendonly", "yes", "--appendfsync", "no")

    verify_redis_persistence(settings_of(redis_url=url, environment="production"))

    assert any("appendfsync=no" in w for w in warnings_of(caplog))


def test_development_warns_once(start_redis: StartRedis, caplog: pytest.LogCaptureFixture) -> None:
    url = start_redis("--appendonly", "no")
    settings = settings_of(redis_url=url, environment="development")

    verify_redis_persistence(settings)
    verify_redis_persistence(settings.model_copy(update={"environment": "test"}))

    warned = warnings_of(caplog)
    assert len(warned) == 1 and "appendonly=no" in warned[0]


def test_development_warns_once_per_redis(
    start_redis: StartRedis, caplog: pytest.LogCaptureFixture
) -> None:
    control, fast = start_redis("--appendonly", "no"), start_redis("--appendonly", "no")
    settings = settings_of(redis_url=control, fast_redis_url=fast, environment="development")

    verify_redis_persistence(settings)
    verify_redis_persistence(settings)

    assert len([w for w in warnings_of(caplog) if "appendonly=no" in w]) == 2


def test_a_redis_with_config_disabled_cannot_be_verified_and_starts(
    start_redis: StartRedis, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a Redis that refuses CONFIG, as managed services do, and has AOF off
    url = start_redis("--appendonly", "no", "--rename-command", "CONFIG", "")

    found = verify_redis_persistence(settings_of(redis_url=url, environment="production"))

    # Then production starts, saying it cannot verify (and what INFO said)
    assert found is not None and found.unverifiable is not None
    warned = warnings_of(caplog)
    assert any("cannot verify the persistence" in w and "INFO reports AOF off" in w for w in warned)


def test_an_unreachable_redis_is_not_verified_and_does_not_stop_the_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"

    assert verify_redis_persistence(settings_of(redis_url=url, environment="production")) is None
    assert any("could not check Redis persistence" in w for w in warnings_of(caplog))


# -- the commands ----------------------------------------------------------------------------


def speedtier(
    *args: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.app.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def command_env(redis_url: str, database_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEEDTIER_")}
    env.pop(WARNED_ENV, None)
    return env | {
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_DATA_DIR": str(tmp_path / "data"),
        "INTERNAL_API_TOKEN": TOKEN,
        "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY": CREDENTIALS_KEY,
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


@pytest.mark.slow
def test_production_commands_refuse_to_start_on_a_redis_without_aof(
    start_redis: StartRedis, database_url: str, tmp_path: Path
) -> None:
    url = start_redis("--appendonly", "no")
    env = command_env(url, database_url, tmp_path, SPEEDTIER_ENV="production")

    for command in (
        ("worker", "--tier", "maintenance", "--processes", "2"),
        ("scheduler",),
        ("api", "--port", str(free_port())),
    ):
        result = speedtier(*command, env=env)
        assert result.returncode == 1, (command, result.stderr[-2000:])
        assert "Error: refusing to start in SPEEDTIER_ENV=production" in result.stderr
        assert "appendonly=no" in result.stderr
        assert "Traceback" not in result.stderr
        assert "started maintenance-" not in result.stderr  # no child was started


@pytest.mark.slow
@pytest.mark.parametrize(
    "environment",
    [
        {"SPEEDTIER_ENV": "development"},
        # production warns at every check: only the pool's parent checks, for its children
        {"SPEEDTIER_ENV": "production", "SPEEDTIER_ALLOW_VOLATILE_REDIS": "true"},
    ],
    ids=["development", "production-allowed"],
)
def test_a_worker_pool_checks_and_warns_once_for_all_its_processes(
    start_redis: StartRedis, database_url: str, tmp_path: Path, environment: dict[str, str]
) -> None:
    # Given a worker pool of 2 processes on a Redis without AOF
    url = start_redis("--appendonly", "no")
    env = command_env(url, database_url, tmp_path, **environment)
    command = [sys.executable, "-m", "services.app.cli", "worker", "--tier", "maintenance"]
    pool = subprocess.Popen(
        [*command, "--processes", "2", "--threads", "1"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert pool.stderr is not None
    lines: list[str] = []
    try:
        # When both children are up and consuming
        deadline = time.monotonic() + 60
        while sum("worker consuming" in line for line in lines) < 2:
            line = pool.stderr.readline()
            assert line and time.monotonic() < deadline, "".join(lines[-40:])
            lines.append(line)
        pool.send_signal(signal.SIGTERM)
        lines += pool.stderr.readlines()
        assert pool.wait(timeout=60) == 0
    finally:
        if pool.poll() is None:  # a failure above: let it stop its children, then insist
            pool.terminate()
            try:
                pool.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pool.kill()
                pool.wait()
        pool.stderr.close()

    # Then three processes started and the warning was printed once
    assert sum("appendonly=no" in line for line in lines) == 1, "".join(lines)
