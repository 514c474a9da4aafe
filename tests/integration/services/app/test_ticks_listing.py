"""Every registered tick is listed: by ``speedtier ticks`` and by the README's scheduler table
(the table under ``## Scheduler``, columns ``| tick | cron (UTC) | what it does |``, each tick
and its cron in backticks). A tick added without its README row fails here."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from services.app.bootstrap import Platform
from services.app.cli import main
from tests import REPO

HEADING = "\n## Scheduler\n"
TABLE_HEADER = "| tick | cron (UTC) | what it does |"
ROW = re.compile(r"^\| `([^`]+)` \| `([^`]+)` \| (.+?) \|$")


def readme_ticks() -> dict[str, str]:
    """tick -> cron, from the README's scheduler table."""
    text = (REPO / "README.md").read_text()
    assert HEADING in text, "README.md has no '## Scheduler' section"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    assert TABLE_HEADER in section, f"the Scheduler section has no table {TABLE_HEADER!r}"
    table = section.split(TABLE_HEADER, 1)[1].strip().splitlines()[1:]  # after | --- |
    rows: dict[str, str] = {}
    for line in table:
        if not line.startswith("|"):
            break
        match = ROW.match(line.strip())
        assert match, f"README scheduler row not in the form | `tick` | `cron` | text |: {line}"
        assert match[1] not in rows, f"{match[1]} listed twice"
        rows[match[1]] = match[2]
    return rows


def test_the_readme_scheduler_table_lists_every_tick_with_its_cron(platform: Platform) -> None:
    registered = {tick.name: tick.cron for tick in platform.ticks}
    listed = readme_ticks()
    missing = sorted(set(registered) - set(listed))
    stale = sorted(set(listed) - set(registered))
    assert not missing and not stale, f"README scheduler table: add {missing}, remove {stale}"
    wrong = {
        name: (listed[name], cron) for name, cron in registered.items() if listed[name] != cron
    }
    assert not wrong, f"README cron differs from the registered tick (README, registry): {wrong}"


def test_speedtier_ticks_lists_every_tick(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = platform.settings
    monkeypatch.setenv("REDIS_URL", settings.redis_url or "")
    monkeypatch.setenv("DATABASE_URL", settings.database_url or "")
    monkeypatch.setenv("SPEEDTIER_REDIS_NAMESPACE", settings.redis_namespace)
    monkeypatch.setenv("SPEEDTIER_ENV", "test")
    result = CliRunner().invoke(main, ["ticks"])
    assert result.exit_code == 0, result.output
    header, *rows = result.output.splitlines()
    assert header.split()[:2] == ["NAME", "CRON"]
    listed = {row.split()[0] for row in rows}
    assert listed == {tick.name for tick in platform.ticks}
    for tick in platform.ticks:
        (row,) = [r for r in rows if r.split()[0] == tick.name]
        assert tick.cron in row


def test_a_command_without_redis_configured_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("SPEEDTIER_REDIS_URL", raising=False)
    result = CliRunner().invoke(main, ["ticks"], env={"SPEEDTIER_DATA_DIR": "/nonexistent"})
    assert result.exit_code == 1
    assert "REDIS_URL is not set" in result.output
    assert "Traceback" not in result.output
