"""Every metric the chart's Grafana dashboard and alert rules query is one the code exports:
the names declared through ``shared.metrics`` (every production module imported) plus what the
API's scrape-time collectors yield against a real Redis and PostgreSQL. A metric renamed in
the code without the dashboard or the rules following fails here, naming it."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from typing import Any

from services.app.api.platform_gauges import PostgresqlGauge, TickGauges
from services.app.bootstrap import Platform
from services.app.worker_process import worker_threads_gauge
from shared import metrics
from shared.clock_offset import offset_gauge
from tests import REPO
from tests.unit.helm.test_alert_rules import MONITORING_ON
from tests.unit.helm.test_chart import of_kind, render
from tiers.queue_depth import QueueDepthCollector

DASHBOARD = REPO / "helm" / "speedtier" / "dashboards" / "speedtier.json"
PACKAGES = ("shared", "tiers", "router", "services")
METRIC = re.compile(r"\bspeedtier_[a-z0-9_]+\b")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def declared() -> set[str]:
    """Sample names of every metric declared through shared.metrics by a production module."""
    for package in PACKAGES:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
            if ".migrations." not in info.name:
                importlib.import_module(info.name)
    # The worker command declares its threads gauge and the clock offset's when it starts,
    # not at import (their modules load no metrics library before the worker needs it).
    worker_threads_gauge()
    offset_gauge()
    names = set()
    for metric in metrics._metrics.values():
        kind: str = metric._type
        names |= {metric._name + suffix for suffix in SUFFIXES[kind]}
    return names


def collected(platform: Platform) -> set[str]:
    """Names the API's scrape-time collectors yield."""
    collectors = [
        QueueDepthCollector(platform.brokers, platform.registry.queues_of_tier),
        TickGauges(platform),
        PostgresqlGauge(platform.settings.database_url),
    ]
    names: set[str] = set()
    for collector in collectors:
        for family in collector.collect():
            # (a gauge with no sample yet, e.g. a tick never emitted, still names itself)
            names |= {family.name} | {sample.name for sample in family.samples}
    return names


def queried(expressions: list[str]) -> set[str]:
    return {name for expr in expressions for name in METRIC.findall(expr)}


def dashboard_expressions() -> list[str]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]


def rule_expressions() -> list[str]:
    (rule,) = of_kind(render(MONITORING_ON), "PrometheusRule")
    return [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]


def test_dashboard_and_rules_query_only_exported_metrics(platform: Platform) -> None:
    exported = declared() | collected(platform)
    # (the check has something to check: the collectors answered, the declarations loaded)
    assert {"speedtier_queue_oldest_age_seconds", "speedtier_postgresql_up"} <= exported
    assert {"speedtier_jobs_total", "speedtier_worker_threads"} <= exported
    for source, expressions in (
        ("dashboard", dashboard_expressions()),
        ("alert rules", rule_expressions()),
    ):
        names = queried(expressions)
        assert len(names) >= 8, names
        unknown = sorted(names - exported)
        assert not unknown, f"the {source} query metrics the code does not export: {unknown}"


def test_the_dashboard_configmap_holds_the_dashboard() -> None:
    configmaps = [
        m
        for m in of_kind(render(MONITORING_ON), "ConfigMap")
        if m["metadata"]["name"].endswith("-dashboard")
    ]
    assert len(configmaps) == 1
    assert configmaps[0]["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads(configmaps[0]["data"]["speedtier.json"])
    assert shipped == json.loads(DASHBOARD.read_text())
    assert shipped["uid"] == "speedtier-overview"
