"""Seed 000's (and 003's) numbers, each pinned by a test: the provider windows of the source
and document syncs, the chunk queue's limiter, the daily tick's cron, the recrawl's floor.

The windows are checked as registered (data) for every provider, and through a real run
for each kind of window: a source window (Notion, 4 a minute: the fifth source sync of one
data source is delayed) and the chunk queue's limiter (60 a minute: the 61st and 62nd chunk
syncs are delayed). The Notion document window's real run is in ``test_source_sync``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from services.app.bootstrap import Platform
from services.app.scheduler import next_fire_time
from services.ingestion.url_sources import MIN_RECRAWL_INTERVAL_SECONDS, refresh_interval_seconds
from services.knowledge_sync.families import document_request, source_request
from shared.config import InvalidSettings, load_settings
from testkit.fakes.notion_server import NotionServer
from tests.fixtures_platform import MakePlatform
from tests.integration.services.knowledge_sync.factories import (
    Kb,
    knowledge_sync_settings,
    record,
    running_workers,
    wait_for,
)
from tests.integration.services.knowledge_sync.test_source_sync import job_states
from tiers.policies import WindowRule

NOTION_TOKEN = "secret_notion"


@pytest.fixture
def notion() -> Iterator[NotionServer]:
    server = NotionServer(NOTION_TOKEN)
    with server:
        yield server


@pytest.fixture
def seed_platform(make_platform: MakePlatform, notion: NotionServer) -> Platform:
    """Knowledge sync with the seed's own windows (no configured override)."""
    return make_platform(
        **knowledge_sync_settings(provider_urls={"notion": notion.base_url}, windows={})
    )


def start_early_in_a_minute() -> None:
    """Windows are fixed minutes of the clock: start early in one, so a slow machine does
    not cross into the next and let an extra start through."""
    if time.time() % 60 > 40:
        time.sleep(60.2 - time.time() % 60)


# -- data: every window as registered ---------------------------------------------------------


@pytest.mark.parametrize(
    ("family", "provider", "rule"),
    [
        ("kb_source_sync", "notion", WindowRule(4, 60.0)),
        ("kb_source_sync", "zendesk", WindowRule(20, 1.0)),
        ("kb_source_sync", "confluence", WindowRule(20, 1.0)),
        ("kb_source_sync", "scribe", WindowRule(20, 1.0)),
        ("kb_document_sync", "notion", WindowRule(4, 60.0)),
        ("kb_document_sync", "scribe", WindowRule(50, 60.0)),
        ("kb_document_sync", "confluence", WindowRule(3000, 60.0)),
        ("kb_document_sync", "zendesk", WindowRule(3000, 60.0)),
        ("kb_document_chunks", None, WindowRule(60, 60.0)),
    ],
)
def test_seed_000_windows_are_what_the_families_register(
    seed_platform: Platform, family: str, provider: str | None, rule: WindowRule
) -> None:
    registered = seed_platform.registry.by_name()[family]
    assert registered.window_for(provider, {}) == rule


def test_the_chunk_queue_runs_4_at_once_for_the_whole_family(seed_platform: Platform) -> None:
    chunks = seed_platform.registry.by_name()["kb_document_chunks"]
    assert chunks.group_by == "global" and dict(chunks.group_caps or {}) == {"fast": 4}
    assert chunks.fixed_tier == "fast"
    assert chunks.group_key(123, "fast") == chunks.group_key(456, "fast")  # one group


def test_the_kb_sync_tick_fires_daily_at_01_00_utc(seed_platform: Platform) -> None:
    tick = seed_platform.tick("kb-sync")
    assert tick.cron == "0 1 * * *"
    fire = next_fire_time(tick.cron, datetime(2026, 11, 30, 0, 30, tzinfo=UTC))
    assert fire == datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
    after = next_fire_time(tick.cron, datetime(2026, 11, 30, 1, 0, 1, tzinfo=UTC))
    assert after == datetime(2026, 12, 1, 1, 0, tzinfo=UTC)


def test_the_recrawl_interval_has_an_hourly_floor() -> None:
    assert MIN_RECRAWL_INTERVAL_SECONDS == 3600.0
    assert load_settings(recrawl_interval_seconds=3600).recrawl_interval_seconds == 3600
    with pytest.raises(InvalidSettings, match="SPEEDTIER_RECRAWL_INTERVAL_SECONDS"):
        load_settings(recrawl_interval_seconds=3599)
    assert refresh_interval_seconds(None, 60.0) == 3600.0  # never sooner, however called
    assert refresh_interval_seconds("hourly", 86_400.0) == 3600.0
    assert refresh_interval_seconds(None, 86_400.0) == 86_400.0


# -- real runs: one per kind of window ---------------------------------------------------------


def test_the_real_notion_source_window_delays_the_fifth_source_sync(
    seed_platform: Platform, kb: Kb
) -> None:
    start_early_in_a_minute()
    org = kb.organization()
    ods = kb.data_source(org, "notion", {"api_token": NOTION_TOKEN})
    sources = [kb.source(org, "notion", ods=ods, name=f"n{n}") for n in range(5)]
    for source_id in sources:
        seed_platform.router.enqueue(source_request(org, source_id, "notion", ods))

    with running_workers(seed_platform, families=["kb_source_sync"]):

        def settled() -> bool:
            states = sorted(job_states(seed_platform, "kb-source-sync-").values())
            return states == ["completed"] * 4 + ["delayed"]

        wait_for(settled)
        time.sleep(0.5)
        assert settled()
    (delayed,) = [
        j for j, s in job_states(seed_platform, "kb-source-sync-").items() if s == "delayed"
    ]
    job = record(seed_platform, delayed)
    assert job["failures"] == "0" and job["last_delay"].startswith("window")


def test_the_real_chunk_limiter_admits_60_a_minute(seed_platform: Platform, kb: Kb) -> None:
    start_early_in_a_minute()
    org = kb.organization()
    documents = [
        kb.document(org, None, identifier=f"d{n}", content=f"Document {n} says hello.")
        for n in range(62)
    ]
    for document_id in documents:
        seed_platform.router.enqueue(
            document_request("sync_document_chunks", org, document_id, None)
        )

    with running_workers(seed_platform, families=["kb_document_chunks"], threads=8):

        def settled() -> bool:
            states = sorted(job_states(seed_platform, "kb-document-chunks-").values())
            return states == ["completed"] * 60 + ["delayed"] * 2

        wait_for(settled, timeout=120)
        time.sleep(0.5)
        assert settled()
