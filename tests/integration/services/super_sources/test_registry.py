"""The source registry: a source's tier is the tier table's (unknown: slow), and adding a
source is one entry: no new family, queue, worker or chart line."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import redis

from services.app.bootstrap import Platform
from services.connectors.nodes import NodeRef
from services.super_sources import install
from services.super_sources.families import import_request, index_request
from services.super_sources.registry import SourceRegistry
from services.super_sources.sources import default_registry
from tests import platform_harness as h
from tests.fixtures_platform import MakePlatform
from tests.integration.services.super_sources import tracker
from tests.integration.services.super_sources.conftest import make_connection, workers
from tests.unit.helm.test_chart import default_tiers
from tiers.table import PROVIDER_TIERS

SIX_QUEUES = {
    f"super_{family}.{tier}"
    for family in ("import", "index", "webhook")
    for tier in ("fast", "slow")
}


def _super_queues(platform: Platform) -> set[str]:
    return {q for f in platform.registry for q in f.queues() if q.startswith("super_")}


def test_a_source_the_tier_table_does_not_know_runs_in_the_slow_tier(
    super_platform: Platform,
) -> None:
    assert tracker.entry("brand_new").tier == "slow"
    assert tracker.entry("gitlab").tier == "fast"
    router = super_platform.router
    root, node = NodeRef("R", "r"), NodeRef("N", "n")
    assert router.enqueue(import_request(1, "brand_new", 1, root)).queue == "super_import.slow"
    assert router.enqueue(index_request(1, "brand_new", 1, root, node)).queue == "super_index.slow"
    assert router.enqueue(import_request(1, "linear", 1, root)).queue == "super_import.fast"


def test_the_default_registry_follows_the_tier_table_and_the_chart_lists_six_queues(
    platform: Platform,
) -> None:
    registry = default_registry()
    assert registry.names()
    for entry in registry:
        assert entry.tier == PROVIDER_TIERS[entry.source]
        assert entry.root_node_types and entry.indexable_node_types
        assert len({hook.path for hook in entry.webhooks}) == len(entry.webhooks)
    assert _super_queues(platform) == SIX_QUEUES
    charted = {q for tier in default_tiers().values() for q in tier["queues"]}
    assert charted >= SIX_QUEUES


def test_adding_a_source_is_one_entry(
    make_platform: MakePlatform,
    redis_client: redis.Redis,
    namespace: str,
    organization: Callable[[], int],
) -> None:
    # Given the production platform, whose workers consume what the chart deploys
    production = make_platform()
    deployed = {tier: production.registry.queues_of_tier(tier) for tier in ("fast", "slow")}
    # When a process registers the sources with one more entry (a source nobody planned for)
    tracker.configure(redis_client, namespace)
    extended = make_platform(services=[])
    install(extended, SourceRegistry.of([*default_registry(), tracker.entry("brand_new")]))
    # Then it has the same families and queues
    assert {f.name for f in extended.registry} == {
        f.name for f in production.registry if f.name.startswith("super_")
    }
    assert _super_queues(extended) == _super_queues(production) == SIX_QUEUES
    # and the new source's import runs on the slow tier's existing queues
    org = organization()
    conn = make_connection(extended, org, "brand_new")
    root = NodeRef(tracker.ROOT_TYPE, f"n{org}")
    tracker.put_nodes(
        redis_client,
        namespace,
        root.node_id,
        {f"{root.node_id}/{n}": ("text", datetime(2026, 1, 1, tzinfo=UTC)) for n in range(3)},
    )
    answer = extended.router.enqueue(import_request(org, "brand_new", conn, root))
    assert answer.queue in deployed["slow"]
    with workers(extended):
        h.wait_until(lambda: h.state(extended.broker, answer.job_id) == "completed")
        h.wait_until(
            lambda: (
                int(
                    redis_client.hget(f"{namespace}:super:counters", "super.brand_new.indexation")
                    or 0
                )
                == 3
            )
        )


def test_the_webhook_actor_runs_ahead_and_the_registry_keeps_quota_for_webhooks(
    super_platform: Platform,
) -> None:
    from services.super_sources.families import WEBHOOK_PRIORITY

    broker = super_platform.broker
    assert broker.get_actor("super_webhook").priority == WEBHOOK_PRIORITY
    assert broker.get_actor("super_index").priority > WEBHOOK_PRIORITY
    reserves = default_registry().webhook_reserves()
    assert reserves["github"] > 0 and reserves["gitlab"] > 0
    assert reserves["git"] == 0  # no webhooks, nothing to keep
