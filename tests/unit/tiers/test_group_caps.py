"""Group caps are declared on each family, not in the tier table (no I/O)."""

from __future__ import annotations

from typing import Any

import tiers.table
from services.ingestion.actors import IngestionActors
from services.ingestion.families import families as ingestion_families
from services.knowledge_sync.actors import KnowledgeSyncActors
from services.knowledge_sync.families import families as kb_families
from tiers.families import Family


def _families() -> dict[str, Family]:
    nothing: Any = None  # the families only bind the actors' methods; none runs here
    ingestion = IngestionActors(sessions=nothing, router=nothing, ctx=nothing)
    kb = KnowledgeSyncActors(sessions=nothing, router=nothing, sync=nothing, crawl=nothing)
    return {f.name: f for f in [*ingestion_families(ingestion), *kb_families(kb)]}


def test_the_tier_table_holds_no_group_caps() -> None:
    assert not hasattr(tiers.table, "GROUP_CAPS")
    assert not hasattr(tiers.table, "group_cap")


def test_one_tenant_ingests_one_document_at_a_time() -> None:
    ingestion = _families()["ingestion"]
    assert ingestion.group_key(7, ingestion.tier_of(None)) == ("ingestion.fast|7", 1)


def test_one_tenant_refreshes_one_document_at_a_time() -> None:
    refresh = _families()["ingestion_refresh"]
    assert refresh.group_key(7, "slow") == ("ingestion_refresh.slow|7", 1)


def test_the_chunk_family_runs_four_at_once_for_every_tenant() -> None:
    chunks = _families()["kb_document_chunks"]
    assert chunks.group_key(7, "fast") == ("kb_document_chunks.fast|*", 4)
    assert chunks.group_key(8, "fast") == ("kb_document_chunks.fast|*", 4)


def test_a_family_without_caps_has_no_group() -> None:
    for name in ("kb_source_sync", "kb_document_sync", "kb_crawl_start", "kb_crawl_url"):
        family = _families()[name]
        assert all(family.group_key(7, tier) is None for tier in tiers.table.TIERS)
