"""Two workers, each with its own really-committing session, drain one crawl's queue with
redeliveries (so both often run the same URL at once): the counts stay exact."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import pytest
from sqlalchemy import Engine, delete, event, func, select
from sqlalchemy.orm import Session, sessionmaker

from services.knowledge_sync import crawl_ledger as ledger
from services.knowledge_sync.crawl_step import crawl_url_step
from services.web.fetch import CrawledPage
from shared.db.engine import session_scope
from shared.db.models import (
    KnowledgeBaseCrawlTask,
    KnowledgeBaseCrawlTaskUrl,
    KnowledgeBaseSource,
    Organization,
)
from shared.errors import Retryable

PAGES = 40
ATTEMPTS = 3


def url_of(index: int) -> str:
    return f"https://site.test/p{index}"


SITE_RANDOM = random.Random(7)
LINKS = {i: [url_of(SITE_RANDOM.randrange(PAGES)) for _ in range(4)] for i in range(PAGES)}
FLAKY = {url_of(i) for i in range(3, PAGES, 5)}  # fail their first attempt


@dataclass(frozen=True)
class Unit:
    url: str | None  # None: the start unit
    attempt: int = 1


@dataclass(frozen=True)
class CrawlIds:
    organization_id: int
    source_id: int
    task_id: int


@pytest.fixture
def crawl_ids(db_session_factory: sessionmaker[Session]) -> Iterator[CrawlIds]:
    with session_scope(db_session_factory) as session:
        organization = Organization(name="concurrent crawl")
        session.add(organization)
        session.flush()
        source = KnowledgeBaseSource(organization_id=organization.id, type="url", name="site")
        session.add(source)
        session.flush()
        task = KnowledgeBaseCrawlTask(
            organization_id=organization.id,
            knowledge_base_source_id=source.id,
            root_url=url_of(0),
            max_depth=4,
            max_urls=30,
        )
        session.add(task)
        session.commit()
        ids = CrawlIds(organization.id, source.id, task.id)
    try:
        yield ids
    finally:
        with session_scope(db_session_factory) as session:
            session.execute(
                delete(KnowledgeBaseCrawlTaskUrl).where(
                    KnowledgeBaseCrawlTaskUrl.organization_id == ids.organization_id
                )
            )
            session.execute(
                delete(KnowledgeBaseCrawlTask).where(KnowledgeBaseCrawlTask.id == ids.task_id)
            )
            session.execute(
                delete(KnowledgeBaseSource).where(KnowledgeBaseSource.id == ids.source_id)
            )
            session.execute(delete(Organization).where(Organization.id == ids.organization_id))
            session.commit()


class SharedQueue:
    """An at-least-once queue two worker threads drain until it is empty and idle."""

    def __init__(self) -> None:
        self._units: deque[Unit] = deque([Unit(None)])
        self._busy = 0
        self._changed = threading.Condition()

    def take(self) -> Unit | None:
        with self._changed:
            while not self._units and self._busy:
                self._changed.wait(0.05)
            if not self._units:
                return None
            self._busy += 1
            return self._units.popleft()

    def put(self, *units: Unit) -> None:
        with self._changed:
            self._units.extend(units)
            self._changed.notify_all()

    def put_next(self, unit: Unit) -> None:
        """Deliver ``unit`` before anything else (to whichever worker is free first)."""
        with self._changed:
            self._units.appendleft(unit)
            self._changed.notify_all()

    def done(self) -> None:
        with self._changed:
            self._busy -= 1
            self._changed.notify_all()


def fetch(url: str, unit: Unit, rnd: random.Random) -> CrawledPage:
    time.sleep(0.002)  # a fetch takes a while: duplicate deliveries overlap
    if url in FLAKY and unit.attempt == 1:
        raise Retryable(f"{url}: HTTP 503")
    # the site changes while it is crawled: each fetch sees one more, random, link
    links = [*LINKS[int(url.rsplit("p", 1)[1])], url_of(rnd.randrange(PAGES))]
    return CrawledPage(url, url, f"# {url}", links, 200)


def check_snapshot(session: Session, task_id: int) -> None:
    """One statement, so one snapshot: the committed counts agree with the ledger."""
    unfinished = (
        select(func.count())
        .select_from(KnowledgeBaseCrawlTaskUrl)
        .where(
            KnowledgeBaseCrawlTaskUrl.crawl_task_id == task_id,
            KnowledgeBaseCrawlTaskUrl.finished_at.is_(None),
        )
        .scalar_subquery()
    )
    status, pending, open_rows = session.execute(
        select(
            KnowledgeBaseCrawlTask.status, KnowledgeBaseCrawlTask.urls_pending, unfinished
        ).where(KnowledgeBaseCrawlTask.id == task_id)
    ).one()
    assert pending == open_rows >= 0
    assert (status == "completed") == (pending == 0)


def worker(
    seed: int,
    queue: SharedQueue,
    sessions: sessionmaker[Session],
    ids: CrawlIds,
    finished: list[str],
    errors: list[BaseException],
) -> None:
    rnd = random.Random(seed)
    scope = {"organization_id": ids.organization_id, "crawl_task_id": ids.task_id}
    redeliveries = 25
    while (unit := queue.take()) is not None:
        try:
            if redeliveries and rnd.random() < 0.35:
                redeliveries -= 1
                queue.put_next(unit)  # delivered again, likely to the other worker right now
            with session_scope(sessions) as session:
                if unit.url is None:
                    children = ledger.start(session, **scope)
                    session.commit()
                else:
                    url = unit.url
                    try:
                        result = crawl_url_step(
                            session,
                            url=url,
                            depth=0,
                            fetch=partial(fetch, unit=unit, rnd=rnd),
                            final_attempt=unit.attempt == ATTEMPTS,
                            store_page=lambda page: None,
                            **scope,
                        )
                    except Retryable:
                        queue.put(replace(unit, attempt=unit.attempt + 1))
                        continue
                    session.commit()
                    children = result.children
                    if result.finished:
                        finished.append(url)
                check_snapshot(session, ids.task_id)
            queue.put(*(Unit(child.url) for child in children))
        except BaseException as exc:
            errors.append(exc)
        finally:
            queue.done()


@pytest.fixture
def slow_statements(engine: Engine) -> Iterator[None]:
    """A millisecond more per statement, so that the two workers' transactions overlap."""

    def pause(*_args: Any) -> None:
        time.sleep(0.001)

    event.listen(engine, "before_cursor_execute", pause)
    yield
    event.remove(engine, "before_cursor_execute", pause)


@pytest.mark.usefixtures("slow_statements")
def test_two_workers_with_redeliveries_leave_exact_counts(
    db_session_factory: sessionmaker[Session], crawl_ids: CrawlIds
) -> None:
    queue = SharedQueue()
    finished: list[str] = []
    errors: list[BaseException] = []
    threads = [
        threading.Thread(
            target=worker,
            args=(seed, queue, db_session_factory, crawl_ids, finished, errors),
        )
        for seed in (1, 2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    with session_scope(db_session_factory) as session:
        status, pending, crawled = session.execute(
            select(
                KnowledgeBaseCrawlTask.status,
                KnowledgeBaseCrawlTask.urls_pending,
                KnowledgeBaseCrawlTask.urls_crawled,
            ).where(KnowledgeBaseCrawlTask.id == crawl_ids.task_id)
        ).one()
        rows = session.execute(
            select(KnowledgeBaseCrawlTaskUrl.url, KnowledgeBaseCrawlTaskUrl.finished_at).where(
                KnowledgeBaseCrawlTaskUrl.crawl_task_id == crawl_ids.task_id
            )
        ).all()
    assert (status, pending) == ("completed", 0)
    assert len(rows) == 30  # the site is larger than the URL cap
    assert all(row.finished_at is not None for row in rows)
    assert Counter(finished) == Counter({row.url: 1 for row in rows})  # each exactly once
    assert crawled == 30  # every URL fetched, the flaky ones on their second attempt
