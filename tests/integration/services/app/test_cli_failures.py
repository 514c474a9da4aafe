"""A ``speedtier`` command whose Redis or PostgreSQL is unreachable, silent or unmigrated, or
whose settings or arguments cannot be used, ends with one line naming the cause and a
non-zero exit, never a traceback (real servers: a closed port, a listener that never
answers, an empty database)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from services.app.cli import main

CLOSED_REDIS = "redis://127.0.0.1:1/0"


def _run(args: list[str], **env: str) -> Result:
    base = {"SPEEDTIER_ENV": "test", "SPEEDTIER_DATA_DIR": env.pop("data_dir", ".speedtier")}
    return CliRunner().invoke(main, args, env={**base, **env})


def _refused(result: Result, *expected: str, code: int = 1) -> None:
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    for text in expected:
        assert text in result.output, result.output


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DATABASE_URL", "not-a-url"),
        ("REDIS_URL", "not-a-url"),
        ("SPEEDTIER_SLOW_REDIS_URL", "xx"),
        ("SPEEDTIER_METRICS_PORT", "70000"),
        ("SPEEDTIER_FLAGS", "{not json"),
        ("LOG_LEVEL", "debug"),
    ],
)
def test_a_setting_that_cannot_be_used_is_named(
    database_url: str, redis_url: str, tmp_path: object, variable: str, value: str
) -> None:
    env = {"DATABASE_URL": database_url, "REDIS_URL": redis_url, variable: value}
    for args in (["status"], ["ready"], ["db", "current"]):
        _refused(_run(args, **env), "invalid settings", variable)


def test_an_unreachable_redis_is_one_line(database_url: str, namespace: str) -> None:
    env = {"DATABASE_URL": database_url, "REDIS_URL": CLOSED_REDIS}
    _refused(_run(["status"], **env, SPEEDTIER_REDIS_NAMESPACE=namespace), "Redis unreachable")
    _refused(_run(["jobs", "show", "x"], **env), "Redis unreachable")


def test_a_tick_whose_jobs_were_not_enqueued_fails(database_url: str, namespace: str) -> None:
    env = {"DATABASE_URL": database_url, "REDIS_URL": CLOSED_REDIS}
    result = _run(["tick", "counter-cache-fix"], **env, SPEEDTIER_REDIS_NAMESPACE=namespace)
    _refused(result, "were not enqueued")


def test_an_unreachable_or_silent_postgresql_is_one_line(redis_url: str, silent_port: int) -> None:
    closed = {"DATABASE_URL": "postgresql://postgres@127.0.0.1:1/x", "REDIS_URL": redis_url}
    _refused(_run(["db", "current"], **closed), "PostgreSQL unreachable")
    silent = {**closed, "DATABASE_URL": f"postgresql://postgres@127.0.0.1:{silent_port}/x"}
    started = time.monotonic()
    _refused(_run(["db", "current"], **silent), "PostgreSQL unreachable", "timeout")
    assert time.monotonic() - started < 60  # libpq alone would wait forever


def test_an_unmigrated_database_says_to_migrate(empty_database_url: str, redis_url: str) -> None:
    result = _run(["claims", "list"], DATABASE_URL=empty_database_url, REDIS_URL=redis_url)
    _refused(result, "not migrated", "speedtier db upgrade")


@pytest.mark.parametrize(
    "args",
    [
        ["uploads", "resolve-completion", "99999999999999999999"],
        ["super", "import", "notion", "99999999999999999999", "NotionPage:abc"],
        ["ingestion", "sync-connector", "--organization", "1", "99999999999999999999"],
        ["alive", "worker-fast", "--max-age", "nan"],
        ["alive", "worker-bogus"],
        ["alive", "x/y"],
        ["ready", "--timeout", "inf"],
        ["ready", "--timeout", "nan"],
    ],
)
def test_an_argument_the_database_or_a_timer_cannot_take_is_a_usage_error(
    args: list[str],
) -> None:
    result = _run(args)
    _refused(result, "Invalid value", code=2)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["ingestion", "tenant-index", "--drop"], "--drop needs --organization"),
        (
            [
                "ingestion",
                "usage",
                "--organization",
                "1",
                "--since",
                "2026-01-01",
                "--until",
                "2025-01-01",
            ],
            "must be after --since",
        ),
        (["pause", "--force", ""], "is not a flag name"),
        (["resume", "--force", " "], "is not a flag name"),
    ],
)
def test_a_command_whose_options_contradict_each_other_is_a_usage_error(
    args: list[str], expected: str
) -> None:
    _refused(_run(args), expected, code=2)


def test_an_unknown_source_lists_the_known_ones() -> None:
    _refused(_run(["super", "import", "zendesk", "1", "Ticket:1"]), "known: ", "github")


def test_retrying_a_report_job_that_does_not_exist_says_so(
    database_url: str, redis_url: str, namespace: str
) -> None:
    env = {"DATABASE_URL": database_url, "REDIS_URL": redis_url}
    result = _run(
        ["reports", "retry", "daily-agent-eval-report-x"],
        **env,
        SPEEDTIER_REDIS_NAMESPACE=namespace,
    )
    _refused(result, "no job daily-agent-eval-report-x")


def test_a_data_directory_that_is_a_file_is_one_line(
    database_url: str, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    a_file = tmp_path / "afile"
    a_file.write_text("")
    env = {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
    }
    result = _run(["up", "--no-embedded"], **env, data_dir=str(a_file))
    _refused(result, f"File exists: {a_file}")
