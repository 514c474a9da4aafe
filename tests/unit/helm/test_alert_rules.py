"""The chart's monitoring objects: off by default, and when on, a PodMonitor over every pod of
the release and a PrometheusRule whose alerts pass ``promtool check rules`` and the unit tests
in ``alerts_test.yaml`` (``promtool test rules``), each alert with a case where it fires and a
``runbook_url`` into a heading of ``docs/operations/alerts.md``.

promtool comes from Debian's ``prometheus`` package (``scripts/ensure-promtool.sh``, run by
``make services``); without it the promtool tests skip locally and fail in CI.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from tests import REPO
from tests.unit.helm.test_chart import CHART, KUBE_VERSION, NAMESPACE, Manifest, of_kind, render

HERE = Path(__file__).resolve().parent
UNIT_TESTS = HERE / "alerts_test.yaml"
RUNBOOK = REPO / "docs" / "operations" / "alerts.md"
RUNBOOK_BASE = "https://docs.test/alerts.md"
MONITORING_ON = {
    "monitoring": {
        "podMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True, "runbookBaseUrl": RUNBOOK_BASE},
        "grafanaDashboard": {"enabled": True},
    }
}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing (scripts/ensure-promtool.sh installs it)")
        pytest.skip("promtool is not installed (make services installs it)")
    return found


def rule_groups() -> list[dict[str, Any]]:
    rules = of_kind(render(MONITORING_ON), "PrometheusRule")
    assert len(rules) == 1
    groups: list[dict[str, Any]] = rules[0]["spec"]["groups"]
    return groups


def alerts() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"] if "alert" in rule]


def anchors(markdown: str) -> set[str]:
    """MkDocs' anchors of a page's headings (lower case, spaces to dashes)."""
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    return tmp_path


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_monitoring_objects_are_off_by_default() -> None:
    kinds = {m["kind"] for m in render({})}
    assert not kinds & {"PodMonitor", "PrometheusRule"}
    names = [m["metadata"]["name"] for m in of_kind(render({}), "ConfigMap")]
    assert not [name for name in names if name.endswith("-dashboard")]


def test_with_monitoring_on_the_chart_lints_and_the_dashboard_configmap_validates() -> None:
    report = helm.lint(
        CHART, MONITORING_ON, strict=True, namespace=NAMESPACE, kube_version=f"v{KUBE_VERSION}"
    )
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []
    (dashboard,) = [
        m
        for m in of_kind(render(MONITORING_ON), "ConfigMap")
        if m["metadata"]["name"].endswith("-dashboard")
    ]
    kubernetes_validate.validate(dashboard, KUBE_VERSION, strict=True)


def test_pod_monitor_scrapes_metrics_and_api_ports_of_the_release() -> None:
    (monitor,) = of_kind(render(MONITORING_ON), "PodMonitor")
    spec: Manifest = monitor["spec"]
    assert spec["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "speedtier",
        "app.kubernetes.io/instance": "st",
    }
    assert {(e["port"], e["path"]) for e in spec["podMetricsEndpoints"]} == {
        ("metrics", "/metrics"),
        ("http", "/metrics"),
    }


def test_rules_pass_promtool_check(rules_dir: Path) -> None:
    result = run(promtool(), "check", "rules", "rules.yaml", cwd=rules_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_passes_its_promtool_unit_tests(rules_dir: Path) -> None:
    result = run(promtool(), "test", "rules", UNIT_TESTS.name, cwd=rules_dir)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_where_it_fires() -> None:
    cases = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    firing = {
        check["alertname"]
        for case in cases
        for check in case.get("alert_rule_test", [])
        if check.get("exp_alerts")
    }
    assert {rule["alert"] for rule in alerts()} == firing


def test_every_alert_links_to_its_runbook_section() -> None:
    documented = anchors(RUNBOOK.read_text())
    for rule in alerts():
        url = rule["annotations"]["runbook_url"]
        base, _, anchor = url.partition("#")
        assert base == RUNBOOK_BASE, url
        assert anchor == rule["alert"].lower(), url
        assert anchor in documented, f"docs/operations/alerts.md has no heading for {url}"
        assert rule["labels"]["severity"] in {"warning", "critical"}


def test_each_tier_gets_its_own_waiting_threshold() -> None:
    values = {**MONITORING_ON, "tiers": {"medium": {"queues": ["reports.medium"]}}}
    rules = of_kind(render(values), "PrometheusRule")[0]["spec"]["groups"][0]["rules"]
    waiting = {
        r["labels"]["tier"]: r["expr"] for r in rules if r["alert"] == "SpeedtierJobsWaiting"
    }
    assert set(waiting) == {"fast", "slow", "maintenance", "medium"}
    assert waiting["fast"].endswith("> 300")
    assert waiting["medium"].endswith("> 1800")  # the default
