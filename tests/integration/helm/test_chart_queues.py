"""The chart's queue lists are the registry's: every tier's ``queues`` (which its KEDA
ScaledObject watches, one Redis trigger per queue) equals what its worker consumes,
``speedtier queues --tier T``. A family registered, renamed or moved to another tier without
updating ``helm/speedtier/values.yaml`` fails here, naming the queues to add and remove."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from services.app.bootstrap import Platform
from services.app.cli import main
from shared.config import TIER_NAMES
from tests.unit.helm.test_chart import FULLNAME, KEDA_ON, default_tiers, of_kind, render


@pytest.mark.parametrize("tier", TIER_NAMES)
def test_the_chart_lists_exactly_the_registered_queues_of_each_tier(
    platform: Platform, tier: str
) -> None:
    registered = platform.registry.queues_of_tier(tier)
    charted = default_tiers()[tier]["queues"]
    missing, stale = sorted(set(registered) - set(charted)), sorted(set(charted) - set(registered))
    assert not missing and not stale, (
        f"helm/speedtier/values.yaml tiers.{tier}.queues: add {missing}, remove {stale} "
        f"(`speedtier queues --tier {tier}` prints the list)"
    )
    assert len(charted) == len(set(charted))


def test_keda_scales_each_tier_on_every_registered_queue(platform: Platform) -> None:
    namespace = "st-prod"
    values = {**KEDA_ON, "config": {"redisNamespace": namespace}}
    scaled = {s["metadata"]["name"]: s for s in of_kind(render(values), "ScaledObject")}
    for tier in TIER_NAMES:
        triggers = scaled[f"{FULLNAME}-worker-{tier}"]["spec"]["triggers"]
        # Dramatiq's Redis broker keeps a queue's ready messages in the list <namespace>:<queue>
        assert sorted(t["metadata"]["listName"] for t in triggers) == [
            f"{namespace}:{queue}" for queue in platform.registry.queues_of_tier(tier)
        ]


def test_speedtier_queues_prints_a_tiers_queues(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = platform.settings
    monkeypatch.setenv("REDIS_URL", settings.redis_url or "")
    monkeypatch.setenv("DATABASE_URL", settings.database_url or "")
    monkeypatch.setenv("SPEEDTIER_REDIS_NAMESPACE", settings.redis_namespace)
    monkeypatch.setenv("SPEEDTIER_ENV", "test")
    result = CliRunner().invoke(main, ["queues", "--tier", "maintenance"])
    assert result.exit_code == 0, result.output
    assert result.output.split() == platform.registry.queues_of_tier("maintenance")
    everything = CliRunner().invoke(main, ["queues"])
    assert everything.exit_code == 0, everything.output
    listed = [line.split() for line in everything.output.splitlines()]
    assert listed == [
        [tier, queue] for tier in TIER_NAMES for queue in platform.registry.queues_of_tier(tier)
    ]
