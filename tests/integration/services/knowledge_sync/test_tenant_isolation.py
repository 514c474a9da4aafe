"""Tenant scope on real workers: a unit sent for another organization's record completes
as record-missing and writes nothing, and one organization's chunk step never touches
another's chunks."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from router.requests import JobRequest
from services.app.bootstrap import Platform
from services.knowledge_sync import crawl_ledger
from shared.db.models import KnowledgeBaseSource
from testkit.fakes import notion_server as nb
from testkit.fakes.notion_server import NotionServer
from tests.fixtures_platform import MakePlatform
from tests.integration.services.knowledge_sync.factories import (
    Kb,
    knowledge_sync_settings,
    record,
    running_workers,
    settle,
    state,
)

TOKEN = "secret_notion"
ROOT = "https://docs.test/"


@pytest.fixture
def notion() -> Iterator[NotionServer]:
    server = NotionServer(TOKEN)
    server.add_page("Upstream", [nb.paragraph("Would be synced.")])
    with server:
        yield server


@pytest.fixture
def platform(make_platform: MakePlatform, notion: NotionServer) -> Platform:
    return make_platform(**knowledge_sync_settings(provider_urls={"notion": notion.base_url}))


@dataclass
class Tenant:
    org: int
    ods: int
    source: int
    document: int
    url_source: int
    task: int


def tenant(kb: Kb, name: str, text: str) -> Tenant:
    org = kb.organization(name)
    ods = kb.data_source(org, "notion", {"api_token": TOKEN})
    source = kb.source(org, "notion", ods=ods)
    document = kb.document(org, source, identifier=f"{name}-page", title=name, content=text)
    url_source = kb.source(org, "url", settings={"url": ROOT})
    task = kb.crawl_task(org, url_source, ROOT)
    with kb.sessions() as session:  # the root claimed, as start_crawl leaves it
        crawl_ledger.start(session, organization_id=org, crawl_task_id=task)
        session.commit()
    return Tenant(org, ods, source, document, url_source, task)


def chunk_rows(kb: Kb, document: int) -> list[tuple[int, int, int, str]]:
    return [(c.id, c.organization_id, c.position, c.content) for c in kb.chunks(document)]


def run(platform: Platform, requests: list[JobRequest]) -> list[str]:
    job_ids = [answer.job_id for answer in platform.router.enqueue_many(requests)]
    with running_workers(platform):
        settle(platform)
    return job_ids


def test_every_unit_sent_with_another_tenants_id_is_record_missing_and_writes_nothing(
    platform: Platform, kb: Kb, notion: NotionServer
) -> None:
    a = tenant(kb, "A", "Tenant A's secret runbook.")
    run(platform, [JobRequest("sync_document_chunks", a.org, {"document_id": a.document})])
    assert kb.chunks(a.document)
    b = kb.organization("B")
    before = kb.snapshot(a.org)

    job_ids = run(
        platform,
        [
            JobRequest("sync_source", b, {"source_id": a.source}),
            JobRequest("sync_source", b, {"source_id": a.url_source}),
            JobRequest("sync_document", b, {"document_id": a.document}),
            JobRequest("sync_document_chunks", b, {"document_id": a.document}),
            JobRequest("start_crawl", b, {"crawl_task_id": a.task}),
            JobRequest("crawl_url", b, {"crawl_task_id": a.task, "url": ROOT, "depth": 0}),
        ],
    )

    assert {job: state(platform, job) for job in job_ids} == {
        job: "record_missing" for job in job_ids
    }
    assert all(record(platform, job)["failures"] == "0" for job in job_ids)
    assert kb.snapshot(a.org) == before
    assert all(rows == [] for rows in kb.snapshot(b).values())
    assert notion.requests == []  # nobody called the provider with A's credentials


def test_a_source_pointing_at_another_tenants_data_source_gets_no_credentials(
    platform: Platform, kb: Kb, notion: NotionServer
) -> None:
    a = tenant(kb, "A", "Tenant A's text.")
    b = kb.organization("B")
    borrowed = kb.source(b, "notion", ods=a.ods)

    (job,) = run(
        platform,
        [JobRequest("sync_source", b, {"source_id": borrowed, "provider": "notion"})],
    )

    assert state(platform, job) == "failed"
    assert record(platform, job)["failures"] == "0"  # unrecoverable: no token of its own
    assert "api_token" in record(platform, job)["last_error"]
    assert notion.requests == []
    assert kb.get(KnowledgeBaseSource, borrowed).sync_status == "failed"
    assert kb.documents(b, borrowed) == {}


def test_the_chunk_step_of_one_tenant_never_touches_anothers_chunks(
    platform: Platform, kb: Kb
) -> None:
    a = tenant(kb, "A", "Alpha content about invoices.")
    b = tenant(kb, "B", "Beta content about refunds.")
    run(platform, [JobRequest("sync_document_chunks", a.org, {"document_id": a.document})])
    a_chunks = chunk_rows(kb, a.document)
    a_search = [(s.id, s.organization_id, s.content) for s in kb.search_rows(a.document)]

    job_ids = run(
        platform,
        [
            JobRequest("sync_document_chunks", b.org, {"document_id": b.document}),
            JobRequest("sync_document_chunks", b.org, {"document_id": a.document}),
        ],
    )

    assert [state(platform, job) for job in job_ids] == ["completed", "record_missing"]
    assert chunk_rows(kb, a.document) == a_chunks
    assert [(s.id, s.organization_id, s.content) for s in kb.search_rows(a.document)] == a_search
    b_chunks = kb.chunks(b.document)
    assert b_chunks and {c.organization_id for c in b_chunks} == {b.org}
    assert "Beta content" in b_chunks[0].content
    assert all(c.organization_id == a.org for c in kb.chunks(a.document))
