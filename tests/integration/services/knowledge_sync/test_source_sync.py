"""Source, document and chunk units run by real workers against the local provider servers:
Notion end to end (follow-ups, idempotence, removal and reclaim, 404, 401, 429, windows,
content changes), Zendesk (sections, locales, snapshot-safe failures), Confluence and
Scribe (happy paths, session-token no-op)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from services.app.bootstrap import Platform
from services.knowledge_sync.families import document_request, source_request
from shared.db.models import KnowledgeBaseDocument, KnowledgeBaseSource
from testkit.fakes import notion_server as nb
from testkit.fakes.confluence_server import ConfluenceServer
from testkit.fakes.notion_server import NotionServer
from testkit.fakes.protocol_server import iso
from testkit.fakes.scribe_server import ScribeServer, step
from testkit.fakes.zendesk_help_center import sample_help_center
from testkit.fakes.zendesk_server import API_TOKEN, EMAIL, FakeZendesk, Kind
from tests.fixtures_platform import MakePlatform
from tests.integration.services.knowledge_sync.factories import (
    Kb,
    job_states,
    knowledge_sync_settings,
    queued_messages,
    record,
    running_workers,
    settle,
    state,
    utc,
    wait_for,
)

NOTION_TOKEN = "secret_notion"


@dataclass
class Fakes:
    notion: NotionServer
    zendesk: FakeZendesk
    confluence: ConfluenceServer
    scribe: ScribeServer

    def urls(self) -> dict[str, str]:
        return {
            "notion": self.notion.base_url,
            "zendesk": self.zendesk.base_url,
            "confluence": self.confluence.base_url,
            "scribe": self.scribe.base_url,
        }


@pytest.fixture
def fakes() -> Iterator[Fakes]:
    fakes = Fakes(
        NotionServer(NOTION_TOKEN),
        FakeZendesk(sample_help_center(extra_articles=2)),
        ConfluenceServer(),
        ScribeServer(),
    )
    with fakes.notion, fakes.zendesk, fakes.confluence, fakes.scribe:
        yield fakes


@pytest.fixture
def platform(make_platform: MakePlatform, fakes: Fakes) -> Platform:
    return make_platform(**knowledge_sync_settings(provider_urls=fakes.urls()))


@dataclass
class Source:
    org: int
    id: int
    type: str
    ods: int | None

    @property
    def job_id(self) -> str:
        return f"kb-source-sync-{self.id}"


def make_source(kb: Kb, type: str, credentials: dict[str, Any], **settings: Any) -> Source:
    org = kb.organization()
    ods = kb.data_source(org, type, credentials)
    return Source(org, kb.source(org, type, ods=ods, settings=settings), type, ods)


def sync(platform: Platform, source: Source) -> None:
    platform.router.enqueue(source_request(source.org, source.id, source.type, source.ods))


def sync_and_settle(platform: Platform, source: Source) -> None:
    sync(platform, source)
    with running_workers(platform):
        settle(platform)


def enqueue_document(platform: Platform, kind: str, org: int, document_id: int) -> str:
    return platform.router.enqueue(document_request(kind, org, document_id, None)).job_id


def live(documents: dict[str, Any]) -> dict[str, Any]:
    return {key: row for key, row in documents.items() if row.discarded_at is None}


def chunk_view(kb: Kb, document_id: int) -> list[tuple[int, int, str]]:
    return [(c.id, c.position, c.content) for c in kb.chunks(document_id)]


# -- Notion ---------------------------------------------------------------------------------


def notion_workspace(notion: NotionServer, pages: int = 3) -> list[str]:
    return [
        notion.add_page(
            f"Guide {n}",
            [nb.heading(1, f"Guide {n}"), nb.paragraph(f"Body of guide {n}."), nb.bulleted("x")],
        )
        for n in range(pages)
    ]


@pytest.fixture
def notion_source(kb: Kb) -> Source:
    return make_source(kb, "notion", {"api_token": NOTION_TOKEN})


def test_notion_source_then_documents_then_chunks(
    platform: Platform, fakes: Fakes, kb: Kb, notion_source: Source
) -> None:
    page_ids = notion_workspace(fakes.notion)
    source = notion_source

    # The source unit alone: documents listed, no content, never marked synced.
    sync(platform, source)
    with running_workers(platform, families=["kb_source_sync"]):
        wait_for(lambda: state(platform, source.job_id) == "completed")
    documents = kb.documents(source.org, source.id)
    assert sorted(documents) == sorted(page_ids)
    assert all(row.content is None and row.last_synced_at is None for row in documents.values())
    assert {row.title for row in documents.values()} == {"Guide 0", "Guide 1", "Guide 2"}
    followed = queued_messages(platform, "kb_document_sync.slow")
    assert sorted(m["options"]["st_job"] for m in followed) == sorted(
        f"kb-document-sync-{row.id}" for row in documents.values()
    )
    assert {m["options"]["st_scope"] for m in followed} == {f"ods-{source.ods}"}
    source_row = kb.get(KnowledgeBaseSource, source.id)
    assert source_row.sync_status == "synced" and source_row.last_synced_at is not None

    # The document units: markdown stored, last_synced_at set, then the chunk units.
    with running_workers(platform):
        settle(platform)
    for page_id, row in kb.documents(source.org, source.id).items():
        n = page_ids.index(page_id)
        assert row.content == f"# Guide {n}\n\nBody of guide {n}.\n\n- x"
        assert row.last_synced_at is not None and row.chunks_synced_at is not None
        chunks = kb.chunks(row.id, source.org)
        assert chunks and all(c.organization_id == source.org for c in chunks)
        assert f"Body of guide {n}." in " ".join(c.content for c in chunks)
        (search,) = kb.search_rows(row.id)
        assert search.organization_id == source.org and f"Body of guide {n}" in search.content
    states = job_states(platform)
    assert states == {
        source.job_id: "completed",
        **{f"kb-document-sync-{r.id}": "completed" for r in documents.values()},
        **{f"kb-document-chunks-{r.id}": "completed" for r in documents.values()},
    }


def test_notion_re_running_every_unit_changes_nothing(
    platform: Platform, fakes: Fakes, kb: Kb, notion_source: Source
) -> None:
    notion_workspace(fakes.notion)
    source = notion_source
    sync_and_settle(platform, source)
    documents = kb.documents(source.org, source.id)
    before = {
        row.id: (
            row.content,
            row.content_hash,
            row.last_synced_at is not None,
            chunk_view(kb, row.id),
        )
        for row in documents.values()
    }
    searches = {row.id: [s.id for s in kb.search_rows(row.id)] for row in documents.values()}

    sync(platform, source)
    for row in documents.values():
        enqueue_document(platform, "sync_document", source.org, row.id)
        enqueue_document(platform, "sync_document_chunks", source.org, row.id)
    with running_workers(platform):
        settle(platform)

    after = kb.documents(source.org, source.id)
    assert {
        row.id: (
            row.content,
            row.content_hash,
            row.last_synced_at is not None,
            chunk_view(kb, row.id),
        )
        for row in after.values()
    } == before
    assert all(row.chunks_synced_at is not None for row in after.values())
    assert {row.id: [s.id for s in kb.search_rows(row.id)] for row in after.values()} == searches
    # The source run found nothing to follow up: every document is synced and chunked.
    assert kb.count(KnowledgeBaseDocument, source.org) == 3


def test_notion_page_removed_upstream_is_discarded_and_reclaimed_when_it_returns(
    platform: Platform, fakes: Fakes, kb: Kb, notion_source: Source
) -> None:
    page_ids = notion_workspace(fakes.notion)
    source = notion_source
    sync_and_settle(platform, source)
    gone = kb.documents(source.org, source.id)[page_ids[1]]
    assert kb.chunks(gone.id) and kb.search_rows(gone.id)
    saved = dict(fakes.notion.pages[page_ids[1].replace("-", "")])

    fakes.notion.remove_page(page_ids[1])
    sync_and_settle(platform, source)
    documents = kb.documents(source.org, source.id)
    assert documents[page_ids[1]].discarded_at is not None
    assert kb.chunks(gone.id) == [] and kb.search_rows(gone.id) == []
    assert sorted(live(documents)) == sorted([page_ids[0], page_ids[2]])
    assert all(kb.chunks(row.id) for row in live(documents).values())

    # The page comes back (re-shared): the same row is reclaimed and searchable again.
    fakes.notion.add_page("Guide 1", [nb.paragraph("Body of guide 1.")], page_id=page_ids[1])
    fakes.notion.pages[page_ids[1].replace("-", "")]["last_edited_time"] = saved["last_edited_time"]
    sync_and_settle(platform, source)
    back = kb.documents(source.org, source.id)[page_ids[1]]
    assert back.id == gone.id and back.discarded_at is None
    assert back.content is not None and back.chunks_synced_at is not None
    assert kb.chunks(back.id) and kb.search_rows(back.id)


def test_notion_page_search_missed_is_kept_and_a_trashed_one_is_discarded(
    platform: Platform, fakes: Fakes, kb: Kb, notion_source: Source
) -> None:
    # Given three synced pages with their chunks
    page_ids = notion_workspace(fakes.notion)
    source = notion_source
    sync_and_settle(platform, source)
    missed = kb.documents(source.org, source.id)[page_ids[0]]
    assert kb.chunks(missed.id)

    # When search misses one live page (not indexed yet) and another is moved to the trash
    fakes.notion.hide_from_search(page_ids[0])
    fakes.notion.archive_page(page_ids[1])
    sync_and_settle(platform, source)

    # Then removal was proven per page: the missed page keeps its row and chunks, the
    # trashed one is discarded
    documents = kb.documents(source.org, source.id)
    assert documents[page_ids[0]].discarded_at is None and kb.chunks(missed.id)
    assert documents[page_ids[1]].discarded_at is not None
    assert sorted(live(documents)) == sorted([page_ids[0], page_ids[2]])
    proofs = [r.path for r in fakes.notion.requests if r.path.startswith("/v1/pages/")]
    assert f"/v1/pages/{page_ids[0]}" in proofs and f"/v1/pages/{page_ids[1]}" in proofs


def test_notion_404_for_one_document_discards_it(
    platform: Platform, fakes: Fakes, kb: Kb, notion_source: Source
) -> None:
    page_ids = notion_workspace(fakes.notion)
    source = notion_source
    sync_and_settle(platform, source)
    documents = kb.documents(source.org, source.id)
    gone, kept = documents[page_ids[0]], documents[page_ids[2]]

    fakes.notion.fail(f"/v1/pages/{page_ids[0]}", "404")
    job = enqueue_document(platform, "sync_document", source.org, gone.id)
    with running_workers(platform):
        settle(platform)

    assert state(platform, job) == "completed"
    assert record(platform, job)["failures"] == "0"
    assert kb.get(KnowledgeBaseDocument, gone.id).discarded_at is not None
    assert kb.chunks(gone.id) == [] and kb.search_rows(gone.id) == []
    assert kb.get(KnowledgeBaseDocument, kept.id).discarded_at is None and kb.chunks(kept.id)


def test_notion_401_fails_the_source_job_at_once_and_marks_the_source_failed(
    platform: Platform, fakes: Fakes, kb: Kb
) -> None:
    notion_workspace(fakes.notion)
    source = make_source(kb, "notion", {"api_token": "revoked"})

    sync(platform, source)
    with running_workers(platform):
        wait_for(lambda: state(platform, source.job_id) == "failed")

    job = record(platform, source.job_id)
    assert (job["attempts"], job["failures"]) == ("1", "0")
    assert "401" in job["last_error"] or "unauthorized" in job["last_error"].lower()
    row = kb.get(KnowledgeBaseSource, source.id)
    assert row.sync_status == "failed" and row.last_sync_error
    assert kb.documents(source.org, source.id) == {}
    assert len(fakes.notion.requests_to("/v1/search")) == 1


def test_notion_429_with_retry_after_delays_the_job_without_failing_it(
    platform: Platform, fakes: Fakes, kb: Kb, notion_source: Source
) -> None:
    notion_workspace(fakes.notion)
    source = notion_source
    fakes.notion.fail("/v1/search", "429", retry_after=30)

    sync(platform, source)
    started = time.time()
    with running_workers(platform):
        wait_for(lambda: state(platform, source.job_id) == "delayed")
        time.sleep(0.3)  # nothing runs it again before the Retry-After
        job = record(platform, source.job_id)
    assert job["state"] == "delayed" and job["failures"] == "0"
    assert job["last_delay"].startswith("retry-after")
    assert len(fakes.notion.requests_to("/v1/search")) == 1
    (delayed,) = [
        m
        for m in _delayed_messages(platform, "kb_source_sync.slow")
        if m["options"]["st_job"] == source.job_id
    ]
    assert delayed["options"]["eta"] / 1000 >= started + 29
    assert kb.get(KnowledgeBaseSource, source.id).sync_status != "failed"


def _delayed_messages(platform: Platform, queue: str) -> list[dict[str, Any]]:
    ns = platform.settings.redis_namespace
    raw = platform.broker.client.hgetall(f"{ns}:{queue}.DQ.msgs")
    return [json.loads(value) for value in raw.values()]


def test_notion_real_document_window_delays_the_fifth_sync_instead_of_failing_it(
    make_platform: MakePlatform, fakes: Fakes, kb: Kb
) -> None:
    # The seed's own windows: Notion document syncs 4 a minute per data source. Windows are
    # fixed minutes of the clock: start early in one, or a slow machine crossing into the
    # next lets a fifth sync through and the expected split never happens.
    if time.time() % 60 > 40:
        time.sleep(60.2 - time.time() % 60)
    platform = make_platform(**knowledge_sync_settings(provider_urls=fakes.urls(), windows={}))
    notion_workspace(fakes.notion, pages=6)
    source = make_source(kb, "notion", {"api_token": NOTION_TOKEN})
    sync(platform, source)
    with running_workers(platform):

        def documents_settled() -> bool:
            states = job_states(platform, "kb-document-sync-")
            return (
                len(states) == 6 and sorted(states.values()) == ["completed"] * 4 + ["delayed"] * 2
            )

        wait_for(documents_settled)
        time.sleep(0.5)
        assert documents_settled()
        delayed = [
            job_id
            for job_id, value in job_states(platform, "kb-document-sync-").items()
            if value == "delayed"
        ]
        for job_id in delayed:
            job = record(platform, job_id)
            assert job["failures"] == "0" and job["last_delay"].startswith("window")
    documents = kb.documents(source.org, source.id).values()
    assert sum(row.content is not None for row in documents) == 4
    assert len(fakes.notion.requests_to("/v1/search")) == 1


def test_notion_content_change_clears_chunks_synced_at_and_re_chunks(
    platform: Platform, fakes: Fakes, kb: Kb, notion_source: Source
) -> None:
    page_ids = notion_workspace(fakes.notion)
    source = notion_source
    sync_and_settle(platform, source)
    row = kb.documents(source.org, source.id)[page_ids[2]]
    old_chunks = chunk_view(kb, row.id)

    key = page_ids[2].replace("-", "")
    fakes.notion.children[key] = []
    fakes.notion.append(page_ids[2], [nb.paragraph("Rewritten: the new procedure.")])
    fakes.notion.pages[key]["last_edited_time"] = iso(time.time() + 120)

    sync(platform, source)
    with running_workers(platform, families=["kb_source_sync", "kb_document_sync"]):
        # The source job re-enqueues the document sync (waiting) before it completes.
        wait_for(
            lambda: (
                state(platform, source.job_id) == "completed"
                and state(platform, f"kb-document-sync-{row.id}") == "completed"
            )
        )
    changed = kb.get(KnowledgeBaseDocument, row.id)
    assert changed.content == "Rewritten: the new procedure."
    assert changed.chunks_synced_at is None
    assert [
        m["options"]["st_job"] for m in queued_messages(platform, "kb_document_chunks.fast")
    ] == [f"kb-document-chunks-{row.id}"]
    # Only the changed page was fetched again.
    assert [len(fakes.notion.requests_to(f"/v1/pages/{p}")) for p in page_ids] == [1, 1, 2]

    with running_workers(platform):
        settle(platform)
    rechunked = chunk_view(kb, row.id)
    assert rechunked != old_chunks
    assert "Rewritten: the new procedure." in " ".join(c[2] for c in rechunked)
    assert kb.get(KnowledgeBaseDocument, row.id).chunks_synced_at is not None
    assert "Rewritten" in kb.search_rows(row.id)[0].content


# -- Zendesk --------------------------------------------------------------------------------

ZENDESK = {"email": EMAIL, "api_token": API_TOKEN, "subdomain": "acme"}


def test_zendesk_sections_with_parents_and_document_links(platform: Platform, kb: Kb) -> None:
    source = make_source(kb, "zendesk", ZENDESK)
    sync_and_settle(platform, source)

    documents = live(kb.documents(source.org, source.id))
    assert sorted(documents) == sorted(
        ["100:en-us", "100:fr", "102:en-us", "103:fr", "104:en-us", "105:en-us"]
    )
    sections = kb.sections(source.org, source.id)
    by_id = {row.id: key for key, row in sections.items()}

    def parent(key: str) -> str | None:
        parent_id = sections[key].parent_id
        return by_id[parent_id] if parent_id else None

    assert parent("section:12:en-us") == "section:11:en-us"
    assert parent("section:11:en-us") == "section:10:en-us"
    assert parent("section:10:en-us") == "category:1:en-us"
    assert parent("category:1:en-us") is None
    assert parent("section:12:fr") == "section:11:fr"
    assert sections["section:12:fr"].name == "Double authentification"
    assert sections["section:11:fr"].name == "Passwords"  # no French name: the default's

    article = documents["100:en-us"]
    assert kb.document_section_ids(article.id) == {sections["section:12:en-us"].id}
    assert kb.document_section_ids(documents["100:fr"].id) == {sections["section:12:fr"].id}
    assert "## Steps" in article.content
    assert "[settings](https://acme.test/settings)" in article.content
    assert article.locale == "en-us" and article.last_synced_at is not None
    for row in documents.values():  # the listing carries content: chunked directly
        assert row.chunks_synced_at is not None and kb.chunks(row.id)
    assert not any(key.startswith("kb-document-sync-") for key in job_states(platform))


def test_zendesk_requested_locales_fall_back_to_the_source_locale(
    platform: Platform, kb: Kb
) -> None:
    source = make_source(kb, "zendesk", ZENDESK, locales=["en-us", "fr"])
    sync_and_settle(platform, source)

    documents = live(kb.documents(source.org, source.id))
    assert sorted(documents) == sorted(
        [
            *("100:en-us", "100:fr"),
            *("102:en-us", "102:fr"),
            *("103:en-us", "103:fr"),
            *("104:en-us", "104:fr"),
            *("105:en-us", "105:fr"),
        ]
    )
    # 102 has only a draft in French: its French document is the English source.
    assert documents["102:fr"].title == "Change your email"
    assert documents["102:fr"].locale == "fr"
    # 103 is written in French: its English document is the French source.
    assert documents["103:en-us"].title == "Télécharger une facture"
    assert documents["100:fr"].title == "Activer la double authentification"


@pytest.mark.parametrize("page", ["first", "later"])
def test_zendesk_failed_article_page_retries_the_job_and_removes_nothing(
    platform: Platform, fakes: Fakes, kb: Kb, page: str
) -> None:
    source = make_source(kb, "zendesk", ZENDESK)
    sync_and_settle(platform, source)
    before_documents = kb.documents(source.org, source.id)
    before_sections = kb.sections(source.org, source.id)

    help_center = fakes.zendesk.help_centers[1]
    help_center.articles = [a for a in help_center.articles if a.id != 104]  # would be removed
    help_center.sections = [s for s in help_center.sections if s.id != 20]
    fakes.zendesk.fail_articles(Kind.SERVER_ERROR, page=page)

    sync(platform, source)
    with running_workers(platform):
        wait_for(lambda: state(platform, source.job_id) == "delayed")
        job = record(platform, source.job_id)
    assert job["failures"] == "1"  # an attempt spent: retried under the family's policy
    assert "500" in job["last_error"]
    after_documents = kb.documents(source.org, source.id)
    assert {k: r.discarded_at for k, r in after_documents.items()} == {
        k: r.discarded_at for k, r in before_documents.items()
    }
    assert all(row.discarded_at is None for row in after_documents.values())
    assert all(r.discarded_at is None for r in kb.sections(source.org, source.id).values())
    assert sorted(kb.sections(source.org, source.id)) == sorted(before_sections)


def test_zendesk_listing_resumes_after_rate_limits_and_finishes_with_removal(
    platform: Platform, fakes: Fakes, kb: Kb
) -> None:
    # Given a synced help center whose article 104 is then deleted upstream
    source = make_source(kb, "zendesk", ZENDESK)
    sync_and_settle(platform, source)
    help_center = fakes.zendesk.help_centers[1]
    help_center.articles = [a for a in help_center.articles if a.id != 104]
    next(a for a in help_center.articles if a.id == 105).translations[0].body = "<p>New</p>"
    # and an account whose per-minute budget runs out twice during the listing (2 a page)
    fakes.zendesk.page_size = 2
    en, fr = "/api/v2/help_center/en-us/articles", "/api/v2/help_center/fr/articles"
    fakes.zendesk.fail(en, Kind.RATE_LIMITED, page=2, times=1, retry_after=1)
    fakes.zendesk.fail(fr, Kind.RATE_LIMITED, page=2, times=1, retry_after=1)
    asked = len(fakes.zendesk.requests)

    sync_and_settle(platform, source)

    # Then the job resumed where each delay stopped it (no page read twice but the ones
    # that answered 429), spent no attempt, and removed 104 once the listing was whole
    job = record(platform, source.job_id)
    assert job["state"] == "completed" and job["failures"] == "0"
    run = [r.split("?")[0] for r in fakes.zendesk.requests[asked:]]
    assert run.count(en) == 2 + 1 and run.count(fr) == 2 + 1  # 2 pages each, one 429
    assert run.count("/api/v2/help_center/en-us/categories") == 1  # not re-read on resume
    after = kb.documents(source.org, source.id)
    assert after["104:en-us"].discarded_at is not None
    assert live(after).keys() == {k for k in after if k != "104:en-us"}
    assert after["105:en-us"].content == "New"
    assert all(kb.chunks(row.id) for row in live(after).values())


# -- Confluence and Scribe ------------------------------------------------------------------


def test_confluence_space_and_pages_sync_to_chunks(
    platform: Platform, fakes: Fakes, kb: Kb
) -> None:
    space = fakes.confluence.add_space("ENG", "Engineering")
    first = fakes.confluence.add_page(
        space,
        "Deploying",
        "<h1>Deploy</h1><p>Run the <strong>pipeline</strong>.</p>"
        '<ac:structured-macro ac:name="code"><ac:parameter ac:name="language">bash'
        "</ac:parameter><ac:plain-text-body><![CDATA[make deploy]]></ac:plain-text-body>"
        "</ac:structured-macro>",
    )
    second = fakes.confluence.add_page(space, "On call", "<p>Page the primary.</p>")
    source = make_source(
        kb, "confluence", {"email": "bot@example.com", "api_token": "confluence-token"}
    )

    sync_and_settle(platform, source)

    documents = live(kb.documents(source.org, source.id))
    assert sorted(documents) == sorted([first, second])
    deploy = documents[first]
    assert deploy.title == "Deploying"
    assert "# Deploy" in deploy.content and "**pipeline**" in deploy.content
    assert "```bash\nmake deploy\n```" in deploy.content
    assert deploy.url.startswith("https://acme.atlassian.net/wiki/spaces/ENG/pages/")
    sections = kb.sections(source.org, source.id)
    assert sections[f"space:{space}"].name == "Engineering"
    assert kb.document_section_ids(deploy.id) == {sections[f"space:{space}"].id}
    for row in documents.values():
        assert row.last_synced_at is not None and row.chunks_synced_at is not None
        assert kb.chunks(row.id) and kb.search_rows(row.id)


def test_scribe_api_key_source_syncs_to_chunks(platform: Platform, fakes: Fakes, kb: Kb) -> None:
    guide = fakes.scribe.add_scribe(
        "Reset a password",
        [step("Open settings", "https://img.test/1.png"), step("Click reset")],
        description="How to reset.",
    )
    other = fakes.scribe.add_scribe("Invite a user", [step("Open people")])
    source = make_source(kb, "scribe", {"api_key": "scribe-key"})

    sync_and_settle(platform, source)

    documents = live(kb.documents(source.org, source.id))
    assert sorted(documents) == sorted([guide, other])
    content = documents[guide].content
    assert content.startswith("How to reset.\n\n1. Open settings")
    assert documents[guide].title == "Reset a password"
    assert documents[guide].url == fakes.scribe.documents[guide]["link"]
    assert "![Step 1](https://img.test/1.png)" in content and "2. Click reset" in content
    for row in documents.values():
        assert row.last_synced_at is not None and row.chunks_synced_at is not None
        assert kb.chunks(row.id)


def test_scribe_session_token_source_is_a_no_op(platform: Platform, fakes: Fakes, kb: Kb) -> None:
    fakes.scribe.add_scribe("Upstream guide", [step("Anything")])
    org = kb.organization()
    source_id = kb.source(org, "scribe", settings={"session_token": "browser-session"})
    synced = kb.document(
        org,
        source_id,
        source_type="scribe",
        identifier="s-1",
        content="Kept as it is.",
        last_synced_at=utc(3600),
        chunks_synced_at=utc(3600),
    )
    never = kb.document(org, source_id, source_type="scribe", identifier="s-2")
    before = kb.snapshot(org)

    source = Source(org, source_id, "scribe", None)
    sync_and_settle(platform, source)

    assert state(platform, source.job_id) == "completed"
    assert state(platform, f"kb-document-sync-{never}") == "completed"
    after = kb.snapshot(org)
    assert after["knowledge_base_documents"] == before["knowledge_base_documents"]
    assert after["document_chunks"] == before["document_chunks"] == []
    assert fakes.scribe.requests == []
    assert kb.get(KnowledgeBaseDocument, synced).content == "Kept as it is."


def test_an_unknown_source_type_fails_without_retry(platform: Platform, kb: Kb) -> None:
    org = kb.organization()
    source = Source(org, kb.source(org, "dropbox"), "dropbox", None)

    sync(platform, source)
    with running_workers(platform):
        wait_for(lambda: state(platform, source.job_id) == "failed")

    job = record(platform, source.job_id)
    assert (job["attempts"], job["failures"]) == ("1", "0")
    assert "dropbox" in job["last_error"]
    assert kb.get(KnowledgeBaseSource, source.id).sync_status == "failed"
