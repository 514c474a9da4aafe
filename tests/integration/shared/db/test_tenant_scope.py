"""The tenant-scoped query layer: a cross-tenant id behaves exactly like a missing one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import Engine, delete, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from shared.db.engine import session_scope
from shared.db.models import (
    DataSource,
    FlipperFeature,
    KnowledgeBaseCrawlTaskUrl,
    KnowledgeBaseDocument,
    KnowledgeBaseSource,
    Organization,
)
from shared.db.tenant import get_scoped, organization_filter, require_scoped, select_scoped
from shared.errors import RecordMissing


@dataclass
class TwoTenants:
    mine: Organization
    theirs: Organization
    source: KnowledgeBaseSource
    document: KnowledgeBaseDocument


@pytest.fixture
def tenants(session: Session) -> TwoTenants:
    mine, theirs = Organization(name="mine"), Organization(name="theirs")
    session.add_all([mine, theirs])
    session.flush()
    source = KnowledgeBaseSource(organization_id=mine.id, type="notion", name="Wiki")
    session.add(source)
    session.flush()
    document = KnowledgeBaseDocument(
        organization_id=mine.id,
        knowledge_base_source_id=source.id,
        source_type="notion",
        source_identifier="page-1",
        content="hello",
    )
    session.add(document)
    session.flush()
    session.expunge_all()  # later reads go to the database, not the identity map
    return TwoTenants(mine, theirs, source, document)


def test_own_row_is_found(session: Session, tenants: TwoTenants) -> None:
    found = get_scoped(
        session, KnowledgeBaseDocument, tenants.document.id, organization_id=tenants.mine.id
    )

    assert found is not None
    assert found.source_identifier == "page-1"


def test_cross_tenant_id_behaves_like_a_missing_one(session: Session, tenants: TwoTenants) -> None:
    missing_id = tenants.document.id + 1_000_000

    cross = get_scoped(
        session, KnowledgeBaseDocument, tenants.document.id, organization_id=tenants.theirs.id
    )
    missing = get_scoped(
        session, KnowledgeBaseDocument, missing_id, organization_id=tenants.mine.id
    )

    assert cross is None
    assert missing is None
    for id_, organization_id in [
        (tenants.document.id, tenants.theirs.id),
        (missing_id, tenants.mine.id),
    ]:
        with pytest.raises(RecordMissing):
            require_scoped(session, KnowledgeBaseDocument, id_, organization_id=organization_id)


def test_select_scoped_returns_only_the_tenants_rows(session: Session, tenants: TwoTenants) -> None:
    def titles(organization_id: int) -> list[str]:
        statement = select_scoped(KnowledgeBaseDocument, organization_id=organization_id).where(
            KnowledgeBaseDocument.discarded_at.is_(None)
        )
        return [d.source_identifier for d in session.scalars(statement)]

    assert titles(tenants.mine.id) == ["page-1"]
    assert titles(tenants.theirs.id) == []


def test_organization_filter_composes_into_hand_built_statements(
    session: Session, tenants: TwoTenants
) -> None:
    statement = (
        select(func.count())
        .select_from(KnowledgeBaseSource)
        .where(organization_filter(KnowledgeBaseSource, tenants.theirs.id))
    )

    assert session.scalar(statement) == 0


def test_for_update_locks_only_within_the_tenant(session: Session, tenants: TwoTenants) -> None:
    source_id = tenants.source.id

    assert (
        get_scoped(
            session,
            KnowledgeBaseSource,
            source_id,
            organization_id=tenants.mine.id,
            for_update=True,
        )
        is not None
    )
    assert (
        get_scoped(
            session,
            KnowledgeBaseSource,
            source_id,
            organization_id=tenants.theirs.id,
            for_update=True,
        )
        is None
    )


def test_api2_ledger_rows_are_tenant_scoped(session: Session, tenants: TwoTenants) -> None:
    row = KnowledgeBaseCrawlTaskUrl(
        organization_id=tenants.mine.id,
        crawl_task_id=1,
        url="https://example.com/",
        url_hash="0" * 64,
        depth=0,
    )
    session.add(row)
    session.flush()

    assert get_scoped(session, KnowledgeBaseCrawlTaskUrl, row.id, organization_id=tenants.mine.id)
    assert (
        get_scoped(session, KnowledgeBaseCrawlTaskUrl, row.id, organization_id=tenants.theirs.id)
        is None
    )


def test_organization_id_is_required_and_keyword_only(
    session: Session, tenants: TwoTenants
) -> None:
    document_id = tenants.document.id

    with pytest.raises(TypeError):
        get_scoped(session, KnowledgeBaseDocument, document_id)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        get_scoped(session, KnowledgeBaseDocument, document_id, tenants.mine.id)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        select_scoped(KnowledgeBaseDocument)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        require_scoped(session, KnowledgeBaseDocument, document_id)  # type: ignore[call-arg]


@pytest.mark.parametrize("organization_id", [None, "1", 1.0, True])
def test_organization_id_must_be_an_int(organization_id: object) -> None:
    with pytest.raises(TypeError, match="organization_id"):
        select_scoped(KnowledgeBaseDocument, organization_id=organization_id)  # type: ignore[arg-type]


@pytest.mark.parametrize("model", [Organization, DataSource, FlipperFeature, dict])
def test_models_without_organization_id_are_rejected(model: type) -> None:
    with pytest.raises(TypeError):
        select_scoped(model, organization_id=1)


def test_timestamps_come_back_as_aware_utc(session: Session, tenants: TwoTenants) -> None:
    # Given a time written with another offset into Rails' timestamp-without-time-zone column
    synced = datetime(2026, 9, 9, 12, 13, 14, tzinfo=timezone(timedelta(hours=2)))
    document = require_scoped(
        session, KnowledgeBaseDocument, tenants.document.id, organization_id=tenants.mine.id
    )
    document.last_synced_at = synced
    session.flush()
    session.expunge_all()

    # Then the column holds the UTC wall-clock time and Python reads the same instant, in UTC
    stored = session.scalar(
        text("SELECT last_synced_at FROM knowledge_base_documents WHERE id = :id"),
        {"id": tenants.document.id},
    )
    again = require_scoped(
        session, KnowledgeBaseDocument, tenants.document.id, organization_id=tenants.mine.id
    )
    assert stored == datetime(2026, 9, 9, 10, 13, 14)
    assert again.last_synced_at == synced
    assert again.last_synced_at is not None and again.last_synced_at.tzinfo is UTC


# --- the session fixtures themselves ------------------------------------------------------


def test_session_fixture_commits_stay_invisible_outside(session: Session, engine: Engine) -> None:
    session.add(Organization(name="fixture-isolation"))
    session.commit()  # releases a savepoint only

    with engine.connect() as other:
        count = other.scalar(
            text("SELECT count(*) FROM organizations WHERE name = 'fixture-isolation'")
        )
    assert count == 0


def test_session_scope_rolls_back_unless_committed(
    db_session_factory: sessionmaker[Session],
) -> None:
    name = f"uow-{datetime.now(UTC).timestamp()}"

    with session_scope(db_session_factory) as uow:
        uow.add(Organization(name=f"{name}-dropped"))
        uow.flush()
    with session_scope(db_session_factory) as uow:
        kept = Organization(name=f"{name}-kept")
        uow.add(kept)
        uow.commit()
    with pytest.raises(RuntimeError), session_scope(db_session_factory) as uow:
        uow.add(Organization(name=f"{name}-failed"))
        uow.flush()
        raise RuntimeError("boom")

    with session_scope(db_session_factory) as uow:
        names = set(
            uow.scalars(select(Organization.name).where(Organization.name.like(f"{name}-%")))
        )
        uow.execute(delete(Organization).where(Organization.id == kept.id))
        uow.commit()
    assert names == {f"{name}-kept"}
