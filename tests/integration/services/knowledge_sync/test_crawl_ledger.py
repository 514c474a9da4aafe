"""The crawl ledger and the crawl_url step on a real PostgreSQL (each test rolled back)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from services.knowledge_sync import crawl_ledger as ledger
from services.knowledge_sync.crawl_ledger import ChildRequest
from services.knowledge_sync.crawl_step import CrawlStepResult, crawl_url_step
from services.web.fetch import CrawledPage
from services.web.robots import Disallowed
from shared.db.models import (
    KnowledgeBaseCrawlTask,
    KnowledgeBaseCrawlTaskUrl,
    KnowledgeBaseSource,
    Organization,
)
from shared.errors import Delay, RecordMissing, Retryable, Unrecoverable
from shared.http import NotFound

ROOT = "https://docs.test/"
A, B, C, D = (f"https://docs.test/{name}" for name in "abcd")


@dataclass
class Crawl:
    organization_id: int
    other_organization_id: int
    task_id: int

    @property
    def scope(self) -> dict[str, int]:
        return {"organization_id": self.organization_id, "crawl_task_id": self.task_id}


def new_crawl(session: Session, *, max_depth: int = 3, max_urls: int = 200) -> Crawl:
    mine, theirs = Organization(name="mine"), Organization(name="theirs")
    session.add_all([mine, theirs])
    session.flush()
    source = KnowledgeBaseSource(organization_id=mine.id, type="url", name="Docs")
    session.add(source)
    session.flush()
    task = KnowledgeBaseCrawlTask(
        organization_id=mine.id,
        knowledge_base_source_id=source.id,
        root_url="https://DOCS.test",
        max_depth=max_depth,
        max_urls=max_urls,
    )
    session.add(task)
    session.flush()
    return Crawl(mine.id, theirs.id, task.id)


@pytest.fixture
def crawl(session: Session) -> Crawl:
    return new_crawl(session)


def task_state(session: Session, crawl: Crawl) -> tuple[str, int, int]:
    """(status, urls_pending, urls_crawled) as the database has them."""
    row = session.execute(
        select(
            KnowledgeBaseCrawlTask.status,
            KnowledgeBaseCrawlTask.urls_pending,
            KnowledgeBaseCrawlTask.urls_crawled,
        ).where(KnowledgeBaseCrawlTask.id == crawl.task_id)
    ).one()
    return row.status, row.urls_pending, row.urls_crawled


def ledger_rows(session: Session, crawl: Crawl) -> dict[str, tuple[str | None, int, bool]]:
    """url -> (parent_url, depth, finished)."""
    rows = session.execute(
        select(
            KnowledgeBaseCrawlTaskUrl.url,
            KnowledgeBaseCrawlTaskUrl.parent_url,
            KnowledgeBaseCrawlTaskUrl.depth,
            KnowledgeBaseCrawlTaskUrl.finished_at,
        ).where(KnowledgeBaseCrawlTaskUrl.crawl_task_id == crawl.task_id)
    ).all()
    return {r.url: (r.parent_url, r.depth, r.finished_at is not None) for r in rows}


def urls(children: list[ChildRequest]) -> list[str]:
    return [child.url for child in children]


def page(url: str, *links: str) -> CrawledPage:
    return CrawledPage(url, f"title {url}", f"# {url}", list(links), 200)


def serving(site: dict[str, list[str]]) -> Callable[[str], CrawledPage]:
    return lambda url: page(url, *site[url])


def failing(error: Exception) -> Callable[[str], CrawledPage]:
    def fetch(url: str) -> CrawledPage:
        raise error

    return fetch


def step(
    session: Session,
    crawl: Crawl,
    url: str,
    fetch: Callable[[str], CrawledPage],
    *,
    final_attempt: bool = False,
    stored: list[CrawledPage] | None = None,
) -> CrawlStepResult:
    return crawl_url_step(
        session,
        url=url,
        depth=0,
        fetch=fetch,
        final_attempt=final_attempt,
        store_page=(stored if stored is not None else []).append,
        **crawl.scope,
    )


# -- start ---------------------------------------------------------------------------------


def test_start_marks_the_task_running_and_claims_the_root_once(
    session: Session, crawl: Crawl
) -> None:
    first = ledger.start(session, **crawl.scope)
    again = ledger.start(session, **crawl.scope)

    root = ChildRequest(crawl.organization_id, crawl.task_id, ROOT, None, 0)
    assert first == again == [root]
    assert root.job_request().params == {
        "crawl_task_id": crawl.task_id,
        "url": ROOT,
        "parent_url": None,
        "depth": 0,
    }
    assert task_state(session, crawl) == ("running", 1, 0)
    assert ledger_rows(session, crawl) == {ROOT: (None, 0, False)}


def test_start_of_a_finished_crawl_emits_nothing(session: Session, crawl: Crawl) -> None:
    ledger.start(session, **crawl.scope)
    ledger.finish(session, url=ROOT, **crawl.scope)

    assert ledger.start(session, **crawl.scope) == []
    assert task_state(session, crawl) == ("completed", 0, 1)


# -- claims --------------------------------------------------------------------------------


def test_claims_skip_duplicates_the_parent_and_urls_claimed_elsewhere(
    session: Session, crawl: Crawl
) -> None:
    ledger.start(session, **crawl.scope)
    ledger.claim_children(session, parent_url=ROOT, depth=0, urls=[A], **crawl.scope)

    children = ledger.claim_children(
        session, parent_url=A, depth=1, urls=[B, B, A, ROOT, C], **crawl.scope
    )

    assert urls(children) == [B, C]
    assert [child.depth for child in children] == [2, 2]
    assert {child.parent_url for child in children} == {A}
    assert task_state(session, crawl) == ("running", 4, 0)


def test_a_replayed_parent_re_emits_its_children_without_counting_them_again(
    session: Session, crawl: Crawl
) -> None:
    ledger.start(session, **crawl.scope)
    first = ledger.claim_children(session, parent_url=ROOT, depth=0, urls=[A, B], **crawl.scope)

    # the page changed between attempts: the replay still re-emits what was claimed
    replay = ledger.claim_children(session, parent_url=ROOT, depth=0, urls=[B, A, C], **crawl.scope)

    assert urls(first) == [A, B]
    assert urls(replay) == [A, B, C]
    assert task_state(session, crawl) == ("running", 4, 0)
    assert urls(ledger.children_of(session, parent_url=ROOT, **crawl.scope)) == [A, B, C]


def test_a_finished_parent_claims_nothing_more(session: Session, crawl: Crawl) -> None:
    ledger.start(session, **crawl.scope)
    ledger.claim_children(session, parent_url=ROOT, depth=0, urls=[A], **crawl.scope)
    ledger.finish(session, url=ROOT, **crawl.scope)

    late = ledger.claim_children(session, parent_url=ROOT, depth=0, urls=[A, B], **crawl.scope)

    assert urls(late) == [A]
    assert task_state(session, crawl) == ("running", 1, 1)


def test_the_depth_cap(session: Session) -> None:
    crawl = new_crawl(session, max_depth=1)
    ledger.start(session, **crawl.scope)

    level_one = ledger.claim_children(session, parent_url=ROOT, depth=0, urls=[A], **crawl.scope)
    level_two = ledger.claim_children(session, parent_url=A, depth=1, urls=[B], **crawl.scope)

    assert urls(level_one) == [A]
    assert level_two == []
    assert task_state(session, crawl) == ("running", 2, 0)


def test_the_url_cap_counts_every_ledger_row(session: Session) -> None:
    crawl = new_crawl(session, max_urls=3)
    ledger.start(session, **crawl.scope)
    ledger.claim_children(session, parent_url=ROOT, depth=0, urls=[A], **crawl.scope)
    ledger.finish(session, url=A, **crawl.scope)

    children = ledger.claim_children(
        session, parent_url=ROOT, depth=0, urls=[B, C, D], **crawl.scope
    )

    assert urls(children) == [A, B]  # finished rows count towards the cap too
    assert len(ledger_rows(session, crawl)) == 3
    assert task_state(session, crawl) == ("running", 2, 1)


def test_children_of_an_unclaimed_parent_cannot_be_claimed(session: Session, crawl: Crawl) -> None:
    ledger.start(session, **crawl.scope)

    with pytest.raises(RecordMissing):
        ledger.claim_children(session, parent_url=A, depth=1, urls=[B], **crawl.scope)


# -- finish --------------------------------------------------------------------------------


def test_finish_counts_down_once_and_completes_with_the_last_url(
    session: Session, crawl: Crawl
) -> None:
    ledger.start(session, **crawl.scope)
    ledger.claim_children(session, parent_url=ROOT, depth=0, urls=[A, B], **crawl.scope)

    assert ledger.finish(session, url=ROOT, **crawl.scope) is True
    assert ledger.finish(session, url=ROOT, **crawl.scope) is False
    assert task_state(session, crawl) == ("running", 2, 1)
    assert ledger.finish(session, url=A, error="HTTP 404", **crawl.scope) is True
    assert task_state(session, crawl) == ("running", 1, 1)
    assert ledger.finish(session, url=B, **crawl.scope) is True
    assert task_state(session, crawl) == ("completed", 0, 2)
    assert ledger.finish(session, url=B, **crawl.scope) is False
    assert ledger.finish(session, url=C, **crawl.scope) is False  # never claimed
    assert task_state(session, crawl) == ("completed", 0, 2)
    assert ledger.is_finished(session, url=A, **crawl.scope)


def test_finish_never_takes_urls_pending_below_zero(session: Session, crawl: Crawl) -> None:
    ledger.start(session, **crawl.scope)
    # Given a counter already at zero (another writer broke the invariant)
    session.execute(
        KnowledgeBaseCrawlTask.__table__.update()
        .where(KnowledgeBaseCrawlTask.id == crawl.task_id)
        .values(urls_pending=0)
    )

    assert ledger.finish(session, url=ROOT, **crawl.scope) is True
    assert task_state(session, crawl) == ("completed", 0, 0)


# -- the crawl_url step --------------------------------------------------------------------


SITE = {ROOT: [A, B], A: [B, C], B: [], C: []}


def test_a_successful_step_stores_claims_and_finishes(session: Session, crawl: Crawl) -> None:
    ledger.start(session, **crawl.scope)
    stored: list[CrawledPage] = []

    result = step(session, crawl, ROOT, serving(SITE), stored=stored)

    assert urls(result.children) == [A, B]
    assert result.finished and not result.replayed
    assert result.page is not None and stored == [result.page]
    assert task_state(session, crawl) == ("running", 2, 1)


def test_a_re_run_finished_url_replays_without_fetching_or_counting(
    session: Session, crawl: Crawl
) -> None:
    ledger.start(session, **crawl.scope)
    first = step(session, crawl, ROOT, serving(SITE))

    replay = step(session, crawl, ROOT, failing(AssertionError("must not fetch")))

    assert replay.replayed and not replay.finished and replay.page is None
    assert replay.children == first.children
    assert task_state(session, crawl) == ("running", 2, 1)


@pytest.mark.parametrize(
    ("error", "reported"),
    [
        (NotFound("GET x: HTTP 404"), True),
        (Unrecoverable("HTTP 410"), True),
        (Disallowed(A), False),
    ],
)
def test_a_4xx_or_disallowed_url_finishes_without_content(
    session: Session, crawl: Crawl, error: Exception, reported: bool
) -> None:
    ledger.start(session, **crawl.scope)

    result = step(session, crawl, ROOT, failing(error))

    assert result.finished and result.page is None and result.children == []
    assert result.error == str(error)
    assert (result.failure is error) is reported
    assert task_state(session, crawl) == ("completed", 0, 0)


@pytest.mark.parametrize("error", [Retryable("HTTP 503"), ConnectionError("reset")])
def test_a_retryable_failure_finishes_only_on_the_final_attempt(
    session: Session, crawl: Crawl, error: Exception
) -> None:
    ledger.start(session, **crawl.scope)

    with pytest.raises(type(error)):
        step(session, crawl, ROOT, failing(error))
    assert task_state(session, crawl) == ("running", 1, 0)

    result = step(session, crawl, ROOT, failing(error), final_attempt=True)

    assert result.finished and result.failure is error
    assert result.error is not None and "final attempt" in result.error
    assert task_state(session, crawl) == ("completed", 0, 0)


def test_a_delay_never_finishes_even_on_the_final_attempt(session: Session, crawl: Crawl) -> None:
    ledger.start(session, **crawl.scope)

    with pytest.raises(Delay):
        step(session, crawl, ROOT, failing(Delay.after(1.0)), final_attempt=True)

    assert task_state(session, crawl) == ("running", 1, 0)


def test_a_delay_that_ends_the_job_finishes_the_url_so_the_crawl_completes(
    session: Session, crawl: Crawl
) -> None:
    # Given a host answering 429 + Retry-After on the last attempt, past the delay limit
    ledger.start(session, **crawl.scope)

    result = crawl_url_step(
        session,
        url=ROOT,
        depth=0,
        fetch=failing(Delay.after(1.0, "retry-after")),
        final_attempt=True,
        store_page=[].append,
        delay_ends_job=lambda delay: delay.source == "provider",
        **crawl.scope,
    )

    # Then the URL is finished without its page and the crawl completes
    assert result.finished and result.error is not None and "kept asking" in result.error
    assert task_state(session, crawl) == ("completed", 0, 0)


def test_a_failing_store_rolls_back_to_its_savepoint(session: Session, crawl: Crawl) -> None:
    ledger.start(session, **crawl.scope)

    def store_then_fail(page: CrawledPage) -> None:
        session.add(Organization(name="written by the failed store"))
        session.flush()
        raise Retryable("database hiccup")

    def run(final_attempt: bool) -> CrawlStepResult:
        return crawl_url_step(
            session,
            url=ROOT,
            depth=0,
            fetch=serving(SITE),
            final_attempt=final_attempt,
            store_page=store_then_fail,
            **crawl.scope,
        )

    with pytest.raises(Retryable):
        run(final_attempt=False)
    result = run(final_attempt=True)

    assert result.finished and result.children == []
    assert (
        session.scalars(
            select(Organization).where(Organization.name == "written by the failed store")
        ).all()
        == []
    )
    assert task_state(session, crawl) == ("completed", 0, 0)


def test_a_whole_crawl_completes_exactly_when_the_last_url_finishes(
    session: Session, crawl: Crawl
) -> None:
    queue = urls(ledger.start(session, **crawl.scope))
    done: list[str] = []
    while queue:
        url = queue.pop(0)
        assert task_state(session, crawl)[0] == "running"
        result = step(session, crawl, url, serving(SITE))
        done.append(url)
        queue.extend(urls(result.children))

    assert done == [ROOT, A, B, C]  # B is claimed once (by the root), not again by A
    assert task_state(session, crawl) == ("completed", 0, 4)
    assert ledger_rows(session, crawl) == {
        ROOT: (None, 0, True),
        A: (ROOT, 1, True),
        B: (ROOT, 1, True),
        C: (A, 2, True),
    }


# -- tenant isolation ----------------------------------------------------------------------


def test_a_cross_tenant_task_behaves_like_a_missing_one(session: Session, crawl: Crawl) -> None:
    ledger.start(session, **crawl.scope)
    theirs = {"organization_id": crawl.other_organization_id, "crawl_task_id": crawl.task_id}
    missing = {"organization_id": crawl.organization_id, "crawl_task_id": crawl.task_id + 999}

    for scope in (theirs, missing):
        with pytest.raises(RecordMissing):
            ledger.start(session, **scope)
        with pytest.raises(RecordMissing):
            ledger.claim_children(session, parent_url=ROOT, depth=0, urls=[A], **scope)
        with pytest.raises(RecordMissing):
            ledger.finish(session, url=ROOT, **scope)
        with pytest.raises(RecordMissing):
            ledger.is_finished(session, url=ROOT, **scope)
        with pytest.raises(RecordMissing):
            ledger.children_of(session, parent_url=ROOT, **scope)
        with pytest.raises(RecordMissing):
            crawl_url_step(
                session,
                url=ROOT,
                depth=0,
                fetch=failing(AssertionError("must not fetch")),
                final_attempt=True,
                store_page=print,
                **scope,
            )

    assert task_state(session, crawl) == ("running", 1, 0)
    assert ledger_rows(session, crawl) == {ROOT: (None, 0, False)}


def test_a_url_the_task_never_claimed_is_record_missing(session: Session, crawl: Crawl) -> None:
    ledger.start(session, **crawl.scope)

    with pytest.raises(RecordMissing, match="never claimed"):
        step(session, crawl, A, failing(AssertionError("must not fetch")))
