"""Property: whatever the site, the failures and the delivery order, a crawl neither strands,
nor completes early, nor counts a URL twice (real PostgreSQL, one transaction per example).

Each example simulates the job queue: a random site graph, per-URL failure modes
(retryable, 4xx, robots.txt, Delay, an unexpected exception), three attempts per unit, an
at-least-once queue that redelivers units (already claimed or already finished), enqueues
that fail after commit, duplicate deliveries racing each other (one commits while the other
fetches), and a random processing order. Units run through the real
``crawl_url_step`` and ledger; a unit's commit is a savepoint release, its rollback a
savepoint rollback.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from services.knowledge_sync import crawl_ledger as ledger
from services.knowledge_sync.crawl_step import crawl_url_step
from services.web.fetch import CrawledPage
from services.web.robots import Disallowed
from shared.db.models import (
    KnowledgeBaseCrawlTask,
    KnowledgeBaseCrawlTaskUrl,
    KnowledgeBaseSource,
    Organization,
)
from shared.errors import Delay, Retryable
from shared.http import NotFound

ATTEMPTS = 3
RECOVERABLE = ("ok", "flaky1", "flaky2", "delayed", "crash")  # succeed within ATTEMPTS
MODES = ("ok", "ok", "flaky1", "flaky2", "down", "gone", "disallowed", "delayed", "crash")


def url_of(index: int) -> str:
    return f"https://site.test/p{index}"


@dataclass(frozen=True)
class Scenario:
    links: dict[int, list[int]]
    modes: dict[int, str]
    max_depth: int
    max_urls: int
    schedule: random.Random
    redeliveries: int
    enqueue_failures: int
    races: int


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    pages = draw(st.integers(1, 8))
    index = st.integers(0, pages - 1)
    return Scenario(
        links={i: draw(st.lists(index, max_size=4)) for i in range(pages)},
        modes={i: draw(st.sampled_from(MODES)) for i in range(pages)},
        max_depth=draw(st.integers(0, 3)),
        max_urls=draw(st.integers(1, 10)),
        schedule=draw(st.randoms(use_true_random=False)),
        redeliveries=draw(st.integers(0, 6)),
        enqueue_failures=draw(st.integers(0, 3)),
        races=draw(st.integers(0, 3)),
    )


@dataclass(frozen=True)
class Unit:
    kind: str  # "start" or "crawl_url"
    url: str | None = None
    attempt: int = 1


@dataclass
class Observed:
    finishes: Counter[str] = field(default_factory=Counter)
    fetched: dict[str, list[str]] = field(default_factory=dict)  # successful pages' links
    depths: dict[str, int] = field(default_factory=dict)
    delayed: set[str] = field(default_factory=set)
    completed: bool = False


def page_for(scenario: Scenario, unit: Unit, seen: Observed, url: str) -> CrawledPage:
    assert not seen.completed, f"{url} fetched after the crawl completed"
    index = int(url.rsplit("p", 1)[1])
    mode = scenario.modes[index]
    if mode == "delayed" and url not in seen.delayed:
        seen.delayed.add(url)
        raise Delay.after(1.0, reason="window")
    if mode == "down" or (mode in ("flaky1", "flaky2") and unit.attempt <= int(mode[-1])):
        raise Retryable(f"{url}: HTTP 503")
    if mode == "crash" and unit.attempt == 1:
        raise RuntimeError("unexpected")
    if mode == "gone":
        raise NotFound(f"{url}: HTTP 404")
    if mode == "disallowed":
        raise Disallowed(url)
    return CrawledPage(url, url, f"# {url}", [url_of(i) for i in scenario.links[index]], 200)


def check_invariants(session: Session, task_id: int, scenario: Scenario, seen: Observed) -> None:
    status, pending = session.execute(
        select(KnowledgeBaseCrawlTask.status, KnowledgeBaseCrawlTask.urls_pending).where(
            KnowledgeBaseCrawlTask.id == task_id
        )
    ).one()
    rows = session.execute(
        select(
            KnowledgeBaseCrawlTaskUrl.url,
            KnowledgeBaseCrawlTaskUrl.depth,
            KnowledgeBaseCrawlTaskUrl.finished_at,
        ).where(KnowledgeBaseCrawlTaskUrl.crawl_task_id == task_id)
    ).all()
    unfinished = sum(1 for row in rows if row.finished_at is None)
    assert pending >= 0
    assert pending == unfinished
    assert (status == "completed") == (bool(rows) and unfinished == 0)
    assert len(rows) <= scenario.max_urls
    assert all(row.depth <= scenario.max_depth for row in rows)
    assert all(count == 1 for count in seen.finishes.values())
    assert set(seen.finishes) == {row.url for row in rows if row.finished_at is not None}
    seen.depths = {row.url: row.depth for row in rows}
    seen.completed = status == "completed"


class Simulation:
    """One worker draining an at-least-once queue in random order."""

    def __init__(
        self, session: Session, task_id: int, organization_id: int, scenario: Scenario
    ) -> None:
        self.session = session
        self.task_id = task_id
        self.scope = {"organization_id": organization_id, "crawl_task_id": task_id}
        self.scenario = scenario
        self.rnd = scenario.schedule
        self.seen = Observed()
        self.redeliveries = scenario.redeliveries
        self.enqueue_failures = scenario.enqueue_failures
        self.races = scenario.races
        self.queue = [Unit("start")]

    def drain(self) -> Observed:
        for _ in range(2000):
            if not self.queue:
                return self.seen
            unit = self.queue.pop(self.rnd.randrange(len(self.queue)))
            if self.redeliveries and self.rnd.random() < 0.3:
                self.redeliveries -= 1
                self.queue.append(unit)  # at-least-once: the same unit again, later
            self.run(unit)
        raise AssertionError("the simulated queue did not drain")

    def run(self, unit: Unit) -> None:
        if unit.kind == "start":
            children = ledger.start(self.session, **self.scope)
        else:
            assert unit.url is not None
            try:
                result = crawl_url_step(
                    self.session,
                    url=unit.url,
                    depth=0,
                    fetch=lambda url: self.fetch(unit, url),
                    final_attempt=unit.attempt == ATTEMPTS,
                    store_page=lambda page: None,
                    **self.scope,
                )
            except Delay:
                self.session.rollback()
                self.queue.append(unit)  # delayed: not an attempt
                return
            except (Retryable, RuntimeError):
                self.session.rollback()
                assert unit.attempt < ATTEMPTS, "the final attempt must not raise"
                self.queue.append(replace(unit, attempt=unit.attempt + 1))
                return
            if result.finished:
                self.seen.finishes[unit.url] += 1
            if result.page is not None:
                self.seen.fetched.setdefault(unit.url, result.page.links)
            children = result.children
        self.session.commit()
        check_invariants(self.session, self.task_id, self.scenario, self.seen)
        if self.enqueue_failures and unit.attempt < ATTEMPTS and self.rnd.random() < 0.2:
            self.enqueue_failures -= 1  # committed, but the enqueue failed: a retry follows
            self.queue.append(replace(unit, attempt=unit.attempt + 1))
            return
        self.queue.extend(Unit("crawl_url", child.url) for child in children)

    def fetch(self, unit: Unit, url: str) -> CrawledPage:
        page = page_for(self.scenario, unit, self.seen, url)
        if self.races and self.rnd.random() < 0.3:
            # While this fetch is under way (this delivery has only read the ledger), a
            # duplicate delivery of the unit runs to its commit on another worker, and the
            # page changes in between: this fetch sees one more link.
            self.races -= 1
            self.run(unit)
            extra = url_of(self.rnd.randrange(len(self.scenario.links)))
            return replace(page, links=[*page.links, extra])
        return page


def check_outcome(session: Session, task_id: int, scenario: Scenario, seen: Observed) -> None:
    check_invariants(session, task_id, scenario, seen)
    assert seen.completed, "every queued unit ran, yet the crawl did not complete"
    assert set(seen.finishes) == set(seen.depths)  # every claimed URL finished exactly once
    for url in seen.depths:  # a failure that heals within the attempts never finished a URL
        if scenario.modes[int(url.rsplit("p", 1)[1])] in RECOVERABLE:
            assert url in seen.fetched, f"{url} finished without its content"
    if len(seen.depths) < scenario.max_urls:  # no cap hit: every link within depth claimed
        for url, links in seen.fetched.items():
            if seen.depths[url] < scenario.max_depth:
                assert set(links) - {url} <= set(seen.depths)


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenario=scenarios())
def test_a_crawl_completes_once_every_claimed_url_finished(
    engine: Engine, scenario: Scenario
) -> None:
    with engine.connect() as connection:
        outer = connection.begin()
        session = Session(bind=connection, join_transaction_mode="create_savepoint")
        try:
            organization = Organization(name="crawler")
            session.add(organization)
            session.flush()
            source = KnowledgeBaseSource(organization_id=organization.id, type="url", name="s")
            session.add(source)
            session.flush()
            task = KnowledgeBaseCrawlTask(
                organization_id=organization.id,
                knowledge_base_source_id=source.id,
                root_url=url_of(0),
                max_depth=scenario.max_depth,
                max_urls=scenario.max_urls,
            )
            session.add(task)
            session.commit()

            seen = Simulation(session, task.id, organization.id, scenario).drain()

            check_outcome(session, task.id, scenario, seen)
        finally:
            session.close()
            outer.rollback()
