"""Processes refuse weak production settings at start, with one line naming the variable
(``shared.config.refusals``), and say at every start that private-network crawling is on."""

from __future__ import annotations

import logging

import pytest
from click.testing import CliRunner, Result

from services.app.bootstrap import bootstrap
from services.app.cli import main
from shared.config import InvalidSettings, Settings
from tests.fixtures_platform import CREDENTIALS_KEY, TOKEN, MakePlatform


def run(args: list[str], redis_url: str, database_url: str, **env: str | None) -> Result:
    """``speedtier ARGS`` with SPEEDTIER_ENV unset (production) unless ``env`` sets it."""
    base: dict[str, str | None] = {
        "SPEEDTIER_ENV": None,
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "INTERNAL_API_TOKEN": TOKEN,
        "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY": CREDENTIALS_KEY,
        "SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS": None,
        "SPEEDTIER_CRAWL_PRIVATE_NETWORKS_ACKNOWLEDGED": None,
    }
    return CliRunner().invoke(main, args, env={**base, **env})


def refused_line(result: Result) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.parametrize("command", [["api"], ["worker", "--tier", "fast"], ["scheduler"]])
def test_a_short_token_stops_every_process(
    redis_url: str, database_url: str, command: list[str]
) -> None:
    line = refused_line(run(command, redis_url, database_url, INTERNAL_API_TOKEN="x"))
    assert "refusing to start in SPEEDTIER_ENV=production: INTERNAL_API_TOKEN is too weak" in line


def test_a_missing_credentials_key_stops_a_worker(redis_url: str, database_url: str) -> None:
    result = run(
        ["worker", "--tier", "fast"],
        redis_url,
        database_url,
        SPEEDTIER_CONNECTOR_CREDENTIALS_KEY=None,
    )
    assert "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY is not set" in refused_line(result)


def test_an_unset_environment_does_not_serve_an_open_api(redis_url: str, database_url: str) -> None:
    line = refused_line(run(["api"], redis_url, database_url, INTERNAL_API_TOKEN=None))
    assert "INTERNAL_API_TOKEN is not set" in line and "production" in line


def test_private_networks_without_the_acknowledgement_stop_a_worker(
    redis_url: str, database_url: str
) -> None:
    result = run(
        ["worker", "--tier", "fast"],
        redis_url,
        database_url,
        SPEEDTIER_ENV="development",
        SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS="true",
    )
    line = refused_line(result)
    assert "SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS=true" in line
    assert "SPEEDTIER_CRAWL_PRIVATE_NETWORKS_ACKNOWLEDGED=true" in line


def test_acknowledged_private_networks_are_warned_about_at_start(
    make_platform: MakePlatform, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="services.app.bootstrap"):
        make_platform(crawl_allow_private_networks=True, crawl_private_networks_acknowledged=True)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("SSRF guard is OFF" in r.getMessage() for r in warnings), caplog.text

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="services.app.bootstrap"):
        make_platform()
    assert "SSRF" not in caplog.text


def test_settings_built_by_hand_are_held_to_the_same_rules(
    redis_url: str, database_url: str
) -> None:
    weak = Settings(  # type: ignore[call-arg]
        environment="production",
        redis_url=redis_url,
        database_url=database_url,
        internal_api_token="x",
        connector_credentials_key=CREDENTIALS_KEY,
    )
    with pytest.raises(InvalidSettings, match="INTERNAL_API_TOKEN is too weak"):
        bootstrap(weak)
