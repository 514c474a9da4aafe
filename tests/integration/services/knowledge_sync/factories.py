"""Rails rows, knowledge-sync settings and real workers for the knowledge sync tests.

Rows are committed through a real session factory (workers run in other threads and need
committed data); every organization a :class:`Kb` creates is removed, with everything
under it, by :meth:`Kb.cleanup`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker

from services.app.bootstrap import Platform
from shared.db.models import (
    DataSource,
    DocumentChunk,
    KnowledgeBaseCrawlTask,
    KnowledgeBaseCrawlTaskUrl,
    KnowledgeBaseDocument,
    KnowledgeBaseDocumentSection,
    KnowledgeBaseSection,
    KnowledgeBaseSource,
    Organization,
    OrganizationDataSource,
    PgSearchDocument,
)
from tests.platform_harness import serving, wait_until
from tiers.fair_order import ready_ids
from tiers.policies import RetryPolicy
from tiers.table import TIERS

CHUNK_TYPE = "KnowledgeBaseDocument"

#: Windows wide enough that no test waits on the seed's real ones (4 a minute for Notion).
WIDE_WINDOWS = {
    "kb_source_sync.*": "1000/1",
    "kb_document_sync.*": "1000/1",
    "kb_document_chunks.*": "1000/1",
}

#: Every Rails knowledge table, children first (what ``wipe_knowledge_tables`` empties).
_TENANT_TABLES: tuple[Any, ...] = (
    DocumentChunk,
    PgSearchDocument,
    KnowledgeBaseDocumentSection,
    KnowledgeBaseDocument,
    KnowledgeBaseSection,
    KnowledgeBaseCrawlTaskUrl,
    KnowledgeBaseCrawlTask,
    KnowledgeBaseSource,
    OrganizationDataSource,
)


def utc(seconds_ago: float = 0.0) -> datetime:
    return datetime.fromtimestamp(datetime.now(UTC).timestamp() - seconds_ago, UTC)


# -- the platform and its workers ---------------------------------------------------------


def knowledge_sync_settings(
    *, provider_urls: Mapping[str, str] | None = None, windows: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Settings for ``make_platform``: the providers at the local servers' URLs, 127.0.0.1
    allowed to the crawler, and windows wide enough that no test waits on the seed's
    (``windows={}`` gives the seed's own)."""
    return {
        "provider_urls": dict(provider_urls or {}),
        "crawl_allow_private_networks": True,
        "crawl_private_networks_acknowledged": True,
        "windows": dict(WIDE_WINDOWS if windows is None else windows),
        "http_timeout_seconds": 5,
    }


def fast_retries(platform: Platform, *names: str, base_seconds: float = 0.5) -> None:
    """Give families (default: every knowledge sync family) a short backoff, so a test can
    watch a retry instead of waiting the seed's 60 s. Attempts stay at three."""
    families = platform.registry.by_name()
    for name in names or [n for n in families if n.startswith("kb_")]:
        retry = RetryPolicy(max_attempts=3, base_seconds=base_seconds)
        families[name] = dataclasses.replace(families[name], retry=retry)


@contextlib.contextmanager
def running_workers(
    platform: Platform,
    *,
    families: Sequence[str] | None = None,
    threads: int = 4,
    drain: float = 5.0,
) -> Iterator[None]:
    """A real Dramatiq worker, in a thread, over every tier's ``queues_of_tier``.

    ``families`` limits the workers to those families' queues (to stop a pipeline after
    one step and look at what it left for the next)."""

    queues = [
        queue
        for tier in TIERS
        for queue in platform.registry.queues_of_tier(tier)
        if families is None or queue.rsplit(".", 1)[0] in families
    ]
    with serving(platform.broker, queues, threads=threads, drain=drain):
        yield


def record(platform: Platform, job_id: str) -> dict[str, str]:
    """The job's record ({} when unknown)."""
    return platform.broker.jobs.record(job_id) or {}


def state(platform: Platform, job_id: str) -> str | None:
    return record(platform, job_id).get("state")


def finished(platform: Platform, *job_ids: str) -> bool:
    return all(
        state(platform, job_id) in ("completed", "failed", "record_missing", "skipped")
        for job_id in job_ids
    )


# Every job record's state read in one atomic step: a unit enqueues its follow-ups before it
# settles, so at an instant when no record is live nothing runs and nothing will.
_ANY_LIVE = """
for _, key in ipairs(redis.call('KEYS', ARGV[1])) do
    local value = redis.call('HGET', key, 'state')
    if value == 'waiting' or value == 'parked' or value == 'delayed' or value == 'active' then
        return 1
    end
end
return 0
"""


#: How long a test waits for workers (generous: CI machines run other suites alongside).
PATIENCE = 45.0


def wait_for(predicate: Callable[[], bool], timeout: float = PATIENCE) -> None:
    wait_until(predicate, timeout=timeout)


def settle(platform: Platform, timeout: float = PATIENCE) -> None:
    """Wait until every job of the platform's namespace is finished."""
    wait_until(lambda: idle(platform), timeout=timeout)


def idle(platform: Platform) -> bool:
    """True when no job of this namespace is waiting, parked, delayed or running."""
    pattern = f"{platform.settings.redis_namespace}:job:*"
    return int(platform.broker.client.eval(_ANY_LIVE, 0, pattern)) == 0


def job_states(platform: Platform, prefix: str = "kb-") -> dict[str, str]:
    """job id -> state of every job of this namespace whose id starts with ``prefix``."""
    ns = platform.settings.redis_namespace
    client = platform.broker.client
    found: dict[str, str] = {}
    for key in client.scan_iter(match=f"{ns}:job:{prefix}*", count=500):
        value = client.hget(key, "state")
        if value is not None:
            found[_text(key).removeprefix(f"{ns}:job:")] = _text(value)
    return found


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def queued_messages(platform: Platform, queue: str) -> list[dict[str, Any]]:
    """Messages waiting in ``queue`` (its Redis list), decoded."""
    ns = platform.settings.redis_namespace
    client = platform.broker.client
    ids = ready_ids(client, ns, queue)
    if not ids:
        return []
    raw = client.hmget(f"{ns}:{queue}.msgs", ids)
    return [json.loads(item) for item in raw if item]


# -- Rails rows ----------------------------------------------------------------------------


@dataclass
class Kb:
    """Creates Rails rows (committed) and reads them back; remembers its organizations."""

    sessions: sessionmaker[Session]
    organizations: list[int] = field(default_factory=list)

    def _add(self, row: Any) -> int:
        with self.sessions() as session:
            session.add(row)
            session.commit()
            return int(row.id)

    def organization(self, name: str = "Acme") -> int:
        org = self._add(Organization(name=name))
        self.organizations.append(org)
        return org

    def data_source(self, organization_id: int, key: str, settings: Mapping[str, Any]) -> int:
        """An organization data source of provider ``key`` holding the credentials."""
        with self.sessions() as session:
            session.execute(
                insert(DataSource)
                .values(key=key, name=key.title(), created_at=utc(), updated_at=utc())
                .on_conflict_do_nothing(index_elements=["key"])
            )
            data_source_id = session.scalar(select(DataSource.id).where(DataSource.key == key))
            ods = OrganizationDataSource(
                organization_id=organization_id,
                data_source_id=data_source_id,
                name=key,
                settings=dict(settings),
            )
            session.add(ods)
            session.commit()
            return int(ods.id)

    def source(
        self,
        organization_id: int,
        type: str,
        *,
        settings: Mapping[str, Any] | None = None,
        ods: int | None = None,
        name: str | None = None,
        discarded: bool = False,
        sync_status: str = "pending",
        last_synced_at: datetime | None = None,
    ) -> int:
        return self._add(
            KnowledgeBaseSource(
                organization_id=organization_id,
                organization_data_source_id=ods,
                type=type,
                name=name or f"{type} source",
                settings=dict(settings or {}),
                discarded_at=utc() if discarded else None,
                sync_status=sync_status,
                last_synced_at=last_synced_at,
            )
        )

    def document(
        self,
        organization_id: int,
        source_id: int | None,
        *,
        source_type: str = "notion",
        identifier: str = "doc",
        title: str | None = "A document",
        content: str | None = None,
        last_synced_at: datetime | None = None,
        chunks_synced_at: datetime | None = None,
        discarded: bool = False,
    ) -> int:
        from services.indexing.digests import content_hash

        return self._add(
            KnowledgeBaseDocument(
                organization_id=organization_id,
                knowledge_base_source_id=source_id,
                source_type=source_type,
                source_identifier=identifier,
                title=title,
                content=content,
                content_hash=content_hash(title, content) if content is not None else None,
                last_synced_at=last_synced_at,
                chunks_synced_at=chunks_synced_at,
                discarded_at=utc() if discarded else None,
            )
        )

    def crawl_task(
        self,
        organization_id: int,
        source_id: int,
        root_url: str,
        *,
        max_depth: int = 3,
        max_urls: int = 200,
    ) -> int:
        return self._add(
            KnowledgeBaseCrawlTask(
                organization_id=organization_id,
                knowledge_base_source_id=source_id,
                root_url=root_url,
                max_depth=max_depth,
                max_urls=max_urls,
            )
        )

    # -- reading back -------------------------------------------------------------------

    def get(self, model: Any, row_id: int) -> Any:
        """A detached copy of one row (None when missing)."""
        with self.sessions() as session:
            row = session.get(model, row_id)
            if row is not None:
                session.expunge(row)
            return row

    def documents(self, organization_id: int, source_id: int) -> dict[str, Any]:
        """source_identifier -> row, discarded ones included."""
        with self.sessions() as session:
            rows = session.scalars(
                select(KnowledgeBaseDocument).where(
                    KnowledgeBaseDocument.organization_id == organization_id,
                    KnowledgeBaseDocument.knowledge_base_source_id == source_id,
                )
            ).all()
            session.expunge_all()
            return {row.source_identifier: row for row in rows}

    def sections(self, organization_id: int, source_id: int) -> dict[str, Any]:
        with self.sessions() as session:
            rows = session.scalars(
                select(KnowledgeBaseSection).where(
                    KnowledgeBaseSection.organization_id == organization_id,
                    KnowledgeBaseSection.knowledge_base_source_id == source_id,
                )
            ).all()
            session.expunge_all()
            return {row.source_identifier: row for row in rows}

    def document_section_ids(self, document_id: int) -> set[int]:
        with self.sessions() as session:
            return set(
                session.scalars(
                    select(KnowledgeBaseDocumentSection.knowledge_base_section_id).where(
                        KnowledgeBaseDocumentSection.knowledge_base_document_id == document_id
                    )
                )
            )

    def chunks(self, document_id: int, organization_id: int | None = None) -> list[Any]:
        """The document's chunk rows (any organization unless one is named), by position."""
        with self.sessions() as session:
            statement = select(DocumentChunk).where(
                DocumentChunk.source_type == CHUNK_TYPE, DocumentChunk.source_id == document_id
            )
            if organization_id is not None:
                statement = statement.where(DocumentChunk.organization_id == organization_id)
            rows = session.scalars(statement.order_by(DocumentChunk.position)).all()
            session.expunge_all()
            return list(rows)

    def search_rows(self, document_id: int) -> list[Any]:
        with self.sessions() as session:
            rows = session.scalars(
                select(PgSearchDocument).where(
                    PgSearchDocument.searchable_type == CHUNK_TYPE,
                    PgSearchDocument.searchable_id == document_id,
                )
            ).all()
            session.expunge_all()
            return list(rows)

    def count(self, model: Any, organization_id: int) -> int:
        with self.sessions() as session:
            return int(
                session.scalar(
                    select(func.count())
                    .select_from(model)
                    .where(model.organization_id == organization_id)
                )
                or 0
            )

    def ledger(self, organization_id: int, task_id: int) -> dict[str, tuple[int, bool]]:
        """url -> (depth, finished) of a crawl task's ledger."""
        with self.sessions() as session:
            rows = session.execute(
                select(
                    KnowledgeBaseCrawlTaskUrl.url,
                    KnowledgeBaseCrawlTaskUrl.depth,
                    KnowledgeBaseCrawlTaskUrl.finished_at,
                ).where(
                    KnowledgeBaseCrawlTaskUrl.organization_id == organization_id,
                    KnowledgeBaseCrawlTaskUrl.crawl_task_id == task_id,
                )
            ).all()
            return {r.url: (r.depth, r.finished_at is not None) for r in rows}

    def crawl_tasks(self, organization_id: int, source_id: int) -> list[Any]:
        with self.sessions() as session:
            rows = session.scalars(
                select(KnowledgeBaseCrawlTask)
                .where(
                    KnowledgeBaseCrawlTask.organization_id == organization_id,
                    KnowledgeBaseCrawlTask.knowledge_base_source_id == source_id,
                )
                .order_by(KnowledgeBaseCrawlTask.id)
            ).all()
            session.expunge_all()
            return list(rows)

    def snapshot(self, organization_id: int) -> dict[str, list[tuple[Any, ...]]]:
        """Every knowledge row of an organization, as comparable tuples."""
        with self.sessions() as session:
            shot: dict[str, list[tuple[Any, ...]]] = {}
            for model in _TENANT_TABLES:
                columns = list(model.__table__.columns)
                rows = session.execute(
                    select(*columns)
                    .where(model.__table__.c.organization_id == organization_id)
                    .order_by(model.__table__.c.id)
                ).all()
                shot[model.__tablename__] = [tuple(row) for row in rows]
            return shot

    # -- cleaning up --------------------------------------------------------------------

    def cleanup(self) -> None:
        if not self.organizations:
            return
        with self.sessions() as session:
            for model in _TENANT_TABLES:
                session.execute(delete(model).where(model.organization_id.in_(self.organizations)))
            session.execute(delete(Organization).where(Organization.id.in_(self.organizations)))
            session.commit()
        self.organizations.clear()


def wipe_knowledge_tables(sessions: sessionmaker[Session]) -> None:
    """Empty every knowledge table of this test database (the tick scans all tenants).

    ``CASCADE`` also empties what other products' tests left referencing these rows (an
    upload's conversation points at its organization data source), whatever ran before.
    """
    tables = ", ".join(model.__table__.fullname for model in _TENANT_TABLES)
    with sessions() as session:
        session.execute(text("SET LOCAL lock_timeout = '10s'"))
        session.execute(text(f"TRUNCATE {tables} CASCADE"))
        session.commit()


def ids(answers: Sequence[Any]) -> list[str]:
    return [answer.job_id for answer in answers]
