"""Durable follow-ups: a unit commits, then enqueues its children; when that enqueue fails
the unit fails its attempt and its retry re-derives the same child ids from the database.
What no retry recovers, the daily tick's recovery sweep does."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest

from router.enqueue import Enqueued
from router.requests import RoutedJob
from services.app.bootstrap import Platform
from services.knowledge_sync.families import document_request, source_request
from shared.db.models import KnowledgeBaseDocument, KnowledgeBaseSource
from shared.errors import QueueUnavailable
from testkit.fakes import notion_server as nb
from testkit.fakes.notion_server import NotionServer
from tests.fixtures_platform import MakePlatform
from tests.integration.services.knowledge_sync.factories import (
    Kb,
    fast_retries,
    job_states,
    knowledge_sync_settings,
    record,
    running_workers,
    settle,
    state,
    utc,
    wait_for,
)

TOKEN = "secret_notion"


@pytest.fixture
def notion() -> Iterator[NotionServer]:
    server = NotionServer(TOKEN)
    with server:
        yield server


@pytest.fixture
def platform(make_platform: MakePlatform, notion: NotionServer) -> Platform:
    platform = make_platform(**knowledge_sync_settings(provider_urls={"notion": notion.base_url}))
    fast_retries(platform, base_seconds=1.0)
    return platform


class FailingEnqueue:
    """Wraps ``platform.router.enqueue_routed`` (the step every enqueue ends in): a call
    with a job ``matches`` selects raises QueueUnavailable (as a Redis outage would) while
    ``budget`` lasts."""

    def __init__(
        self, platform: Platform, matches: Callable[[RoutedJob], bool], budget: int = 1
    ) -> None:
        self.platform = platform
        self.matches = matches
        self.budget = budget
        self.refused: list[list[str]] = []  # job ids of each refused call
        self.accepted: list[list[str]] = []  # job ids of each later matching call
        self._original = platform.router.enqueue_routed

    def __call__(self, routed: Sequence[RoutedJob]) -> list[Enqueued]:
        if any(self.matches(job) for job in routed):
            job_ids = [job.job_id for job in routed]
            if self.budget > 0:
                self.budget -= 1
                self.refused.append(job_ids)
                raise QueueUnavailable("injected: Redis did not accept the follow-ups")
            self.accepted.append(job_ids)
        return self._original(routed)

    def __enter__(self) -> FailingEnqueue:
        self.platform.router.enqueue_routed = self  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self.platform.router.enqueue_routed = self._original  # type: ignore[method-assign]


def kind_is(kind: str) -> Callable[[RoutedJob], bool]:
    return lambda job: job.family.kind == kind


def test_a_source_whose_follow_up_enqueue_failed_re_derives_them_on_retry(
    platform: Platform, notion: NotionServer, kb: Kb
) -> None:
    pages = [notion.add_page(f"Page {n}", [nb.paragraph(f"Text {n}.")]) for n in range(3)]
    org = kb.organization()
    ods = kb.data_source(org, "notion", {"api_token": TOKEN})
    source = kb.source(org, "notion", ods=ods)
    job_id = f"kb-source-sync-{source}"

    with FailingEnqueue(platform, kind_is("sync_document")) as failing:
        platform.router.enqueue(source_request(org, source, "notion", ods))
        with running_workers(platform):
            wait_for(lambda: record(platform, job_id).get("failures") == "1")
            # The attempt failed after its writes committed: documents are there, their
            # syncs are not.
            documents = kb.documents(org, source)
            assert sorted(documents) == sorted(pages)
            assert all(row.last_synced_at is None for row in documents.values())
            assert job_states(platform, "kb-document-sync-") == {}
            assert state(platform, job_id) == "delayed"

            settle(platform)

    assert state(platform, job_id) == "completed"
    assert record(platform, job_id)["failures"] == "1"
    (refused,) = failing.refused
    assert sorted(refused) == sorted(f"kb-document-sync-{row.id}" for row in documents.values())
    assert [sorted(ids) for ids in failing.accepted] == [sorted(refused)]
    for row in kb.documents(org, source).values():
        assert row.content and row.last_synced_at and row.chunks_synced_at
        assert len(kb.chunks(row.id)) == 1
    assert kb.get(KnowledgeBaseSource, source).sync_status == "synced"
    assert len(notion.requests_to("/v1/search")) == 2  # the retry listed the source again


def test_a_document_whose_chunk_enqueue_failed_re_emits_it_on_its_own_retry(
    platform: Platform, notion: NotionServer, kb: Kb
) -> None:
    page = notion.add_page("Runbook", [nb.paragraph("Restart the service.")])
    org = kb.organization()
    ods = kb.data_source(org, "notion", {"api_token": TOKEN})
    source = kb.source(org, "notion", ods=ods)
    synced = kb.document(org, source, identifier=page, title="Runbook")
    # A document with no source (created in Rails, content written there) recovers too.
    standalone = kb.document(org, None, identifier="local", content="Written in Rails.")
    jobs = {doc: f"kb-document-sync-{doc}" for doc in (synced, standalone)}

    with FailingEnqueue(platform, kind_is("sync_document_chunks"), budget=2) as failing:
        for doc in jobs:
            platform.router.enqueue(document_request("sync_document", org, doc, None))
        with running_workers(platform):
            wait_for(lambda: all(record(platform, j).get("failures") == "1" for j in jobs.values()))
            fetched = kb.get(KnowledgeBaseDocument, synced)
            assert fetched.content == "Restart the service." and fetched.chunks_synced_at is None
            assert kb.chunks(synced) == [] and kb.chunks(standalone) == []
            settle(platform)

    assert sorted(map(sorted, failing.refused)) == sorted(
        [[f"kb-document-chunks-{synced}"], [f"kb-document-chunks-{standalone}"]]
    )
    assert sorted(map(sorted, failing.accepted)) == sorted(failing.refused)
    for doc, job_id in jobs.items():
        assert (state(platform, job_id), record(platform, job_id)["failures"]) == ("completed", "1")
        assert state(platform, f"kb-document-chunks-{doc}") == "completed"
        assert kb.chunks(doc) and kb.get(KnowledgeBaseDocument, doc).chunks_synced_at
    assert kb.chunks(synced)[0].content.endswith("Restart the service.")
    assert len(notion.requests_to(f"/v1/pages/{page}")) == 2


def test_the_daily_sweep_chunks_documents_left_with_content_and_no_chunks(
    platform: Platform, notion: NotionServer, kb: Kb
) -> None:
    page = notion.add_page("Policy", [nb.paragraph("Rotate keys yearly.")])
    org = kb.organization()
    ods = kb.data_source(org, "notion", {"api_token": TOKEN})
    source = kb.source(org, "notion", ods=ods)
    stranded = kb.document(org, source, identifier=page, title="Policy")
    backlog = kb.document(org, None, identifier="b", content="Imported before the cut-over.")
    not_swept = {
        "discarded": kb.document(org, None, identifier="d", content="x", discarded=True),
        "empty": kb.document(org, None, identifier="e", content=""),
        "no content": kb.document(org, None, identifier="n"),
        "intercom": kb.document(org, None, source_type="intercom", identifier="i", content="x"),
        "chunked": kb.document(org, None, identifier="c", content="x", chunks_synced_at=utc()),
    }

    # Every attempt of the document's chunk enqueue fails: its job gives up, content stored.
    fast_retries(platform, base_seconds=0.2)
    with FailingEnqueue(platform, kind_is("sync_document_chunks"), budget=3):
        platform.router.enqueue(document_request("sync_document", org, stranded, None))
        with running_workers(platform):
            wait_for(lambda: state(platform, f"kb-document-sync-{stranded}") == "failed")
    assert record(platform, f"kb-document-sync-{stranded}")["failures"] == "3"
    assert kb.get(KnowledgeBaseDocument, stranded).content == "Rotate keys yearly."
    assert kb.chunks(stranded) == []

    summary = platform.tick("kb-sync").run("2026-11-30T01:00Z")
    assert summary["failed"] == 0
    with running_workers(platform):
        settle(platform)

    for doc in (stranded, backlog):
        assert state(platform, f"kb-document-chunks-{doc}") == "completed"
        assert kb.chunks(doc) and kb.get(KnowledgeBaseDocument, doc).chunks_synced_at
    for name, doc in not_swept.items():
        assert state(platform, f"kb-document-chunks-{doc}") is None, name
    assert kb.chunks(not_swept["chunked"]) == []  # chunked already: left alone
    # The tick also re-scanned the source, which found nothing left to fetch.
    assert state(platform, f"kb-source-sync-{source}") == "completed"
    assert kb.get(KnowledgeBaseDocument, stranded).discarded_at is None
