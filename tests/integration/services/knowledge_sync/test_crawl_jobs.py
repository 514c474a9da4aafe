"""URL sources crawled by real workers against a real local website: the source sync opens a
crawl task, start_crawl and crawl_url store pages as documents (chunked), the task completes
with nothing pending, and the depth cap, the URL cap and robots.txt hold.

The crawler's politeness allows one request a second per host, so each crawl here takes a
few seconds; the sites are kept small."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from router.requests import JobRequest
from services.app.bootstrap import Platform
from shared.db.models import KnowledgeBaseSource
from testkit.fakes.website import SCRIPT_MARKER, FakeWebsite
from tests.integration.services.knowledge_sync.factories import (
    Kb,
    job_states,
    running_workers,
    settle,
    state,
    wait_for,
)


@pytest.fixture
def site() -> Iterator[FakeWebsite]:
    with FakeWebsite(pages=7) as site:
        yield site


def crawl_source(platform: Platform, kb: Kb, settings: dict[str, Any]) -> tuple[int, int]:
    """Sync a new URL source through the workers until every job is done; (org, source)."""
    org = kb.organization()
    source = kb.source(org, "url", settings=settings)
    platform.router.enqueue(
        JobRequest("sync_source", org, {"source_id": source, "provider": "url"})
    )
    with running_workers(platform):
        settle(platform)
    return org, source


def test_a_url_source_is_crawled_into_chunked_documents_within_its_depth(
    platform: Platform, kb: Kb, site: FakeWebsite
) -> None:
    root = site.url("/page/0")
    org, source = crawl_source(platform, kb, {"url": root, "max_depth": 1})

    (task,) = kb.crawl_tasks(org, source)
    assert (task.status, task.urls_pending, task.root_url) == ("completed", 0, root)
    assert task.started_at is not None and task.finished_at is not None
    # The root and its links one level down; the robots-disallowed one claimed but not stored.
    children = [site.url(p) for p in ("/page/3", "/page/3?ref=cross", "/page/1", "/page/2")]
    private = site.url("/private/secret-0")
    assert kb.ledger(org, task.id) == {
        root: (0, True),
        **{url: (1, True) for url in children},
        private: (1, True),
    }
    assert task.urls_crawled == 5
    assert "robots.txt" in (task.last_error or "")

    documents = kb.documents(org, source)
    assert sorted(documents) == sorted([root, *children])
    home = documents[root]
    assert home.title == "Page 0 | Fake site" and home.url == root
    assert "# Heading 0" in home.content and SCRIPT_MARKER not in home.content
    for row in documents.values():
        assert row.source_type == "url" and row.discarded_at is None
        assert row.chunks_synced_at is not None and kb.chunks(row.id, org)
        assert kb.search_rows(row.id)

    assert site.requested("/private/") == []  # robots.txt forbids it: never fetched
    for deeper in ("/page/4", "/page/5", "/page/6"):  # depth 2: beyond the cap
        assert site.requested(deeper) == []
    assert len(site.requested("/page/0")) == 1
    assert kb.get(KnowledgeBaseSource, source).sync_status == "synced"

    states = job_states(platform)
    assert states[f"kb-source-sync-{source}"] == "completed"
    assert states[f"kb-crawl-start-{task.id}"] == "completed"
    url_jobs = {job: value for job, value in states.items() if job.startswith("kb-crawl-url-")}
    assert len(url_jobs) == 6 and set(url_jobs.values()) == {"completed"}


def test_the_url_cap_stops_claiming_and_the_task_still_completes(
    platform: Platform, kb: Kb, site: FakeWebsite
) -> None:
    root = site.url("/page/0")
    org, source = crawl_source(platform, kb, {"url": root, "max_depth": 3, "max_urls": 3})

    (task,) = kb.crawl_tasks(org, source)
    assert (task.status, task.urls_pending, task.urls_crawled) == ("completed", 0, 3)
    first_two = [site.url("/page/3"), site.url("/page/3?ref=cross")]
    assert kb.ledger(org, task.id) == {root: (0, True), **{url: (1, True) for url in first_two}}
    assert sorted(kb.documents(org, source)) == sorted([root, *first_two])
    for never in ("/page/1", "/page/2", "/page/4", "/private/"):
        assert site.requested(never) == [], never


def test_a_second_sync_while_the_crawl_runs_continues_the_same_task(
    platform: Platform, kb: Kb, site: FakeWebsite
) -> None:
    root = site.url("/page/0")
    org = kb.organization()
    source = kb.source(org, "url", settings={"url": root, "max_depth": 0})
    request = JobRequest("sync_source", org, {"source_id": source, "provider": "url"})

    source_job = f"kb-source-sync-{source}"

    platform.router.enqueue(request)
    with running_workers(platform, families=["kb_source_sync", "kb_crawl_start"]):
        wait_for(lambda: state(platform, source_job) == "completed" and _started(kb, org, source))
    (running,) = kb.crawl_tasks(org, source)
    assert (running.status, running.urls_pending) == ("running", 1)

    platform.router.enqueue(request)  # the daily scan again, while the root waits
    with running_workers(platform, families=["kb_source_sync"]):
        wait_for(lambda: state(platform, source_job) == "completed")
    with running_workers(platform):
        settle(platform)

    (task,) = kb.crawl_tasks(org, source)
    assert (task.status, task.urls_pending, task.urls_crawled) == ("completed", 0, 1)
    assert task.id == running.id
    assert list(kb.documents(org, source)) == [root]
    assert len(site.requested("/page/0")) == 1


def _started(kb: Kb, org: int, source: int) -> bool:
    return any(task.status == "running" for task in kb.crawl_tasks(org, source))
