"""One version everywhere: setup.cfg's is what ``speedtier --version`` prints, the chart's
``appVersion`` (the image tag the chart deploys by default), the Dockerfile's ``VERSION``
label and the changelog's latest release."""

from __future__ import annotations

import configparser
import re
from importlib import metadata
from pathlib import Path

import yaml
from click.testing import CliRunner

from services.app.cli import main

ROOT = Path(__file__).resolve().parents[2]


def package_version() -> str:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config["metadata"]["version"]


def test_speedtier_version_prints_the_installed_package_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"speedtier {metadata.version('speedtier')}\n"
    assert metadata.version("speedtier") == package_version()


def test_the_chart_and_the_image_carry_the_package_version() -> None:
    chart = yaml.safe_load((ROOT / "helm/speedtier/Chart.yaml").read_text())
    assert chart["appVersion"] == package_version()
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG VERSION=(\S+)$", dockerfile, re.M)[1] == package_version()  # type: ignore[index]


def test_the_changelog_has_an_entry_for_the_package_version() -> None:
    changelog = (ROOT / "docs/changelog.md").read_text()
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", changelog, re.M)
    assert releases and releases[0] == package_version()
