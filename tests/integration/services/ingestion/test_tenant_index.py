"""A large tenant's own HNSW index (:mod:`services.ingestion.tenant_index`) on the embedded
PostgreSQL with pgvector: built, listed, walked by the HNSW path of that tenant's searches
only, dropped; and ``speedtier ingestion tenant-index`` where there is no pgvector."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from services.app.cli import main
from services.indexing.embedders import HashingEmbedder
from services.ingestion.search import SearchScope, VectorPath, vector_search
from services.ingestion.tenant_index import (
    create_tenant_index,
    drop_tenant_index,
    index_name,
    tenant_indexes,
)
from testkit.search_corpus import TextMaker, load_corpus

EMBEDDER = HashingEmbedder()


@pytest.fixture
def organization_id(pgvector_engine: Engine) -> Iterator[int]:
    """An organization id no other test uses; its index is dropped afterwards."""
    organization_id = random.randrange(10**12, 2**62)
    yield organization_id
    drop_tenant_index(pgvector_engine, organization_id)


def scans_of(session: Session, index: str) -> int:
    """Scans of ``index`` in the session's transaction so far."""
    return int(
        session.execute(
            text("SELECT pg_stat_get_xact_numscans(to_regclass(:index))"),
            {"index": f"api2.{index}"},
        ).scalar_one()
    )


def test_a_tenants_index_serves_its_hnsw_path_and_no_other_tenants(
    pgvector_engine: Engine, organization_id: int
) -> None:
    # Given: the tenant's own index (built before its chunks: rows written later enter it).
    assert create_tenant_index(pgvector_engine, organization_id) is True
    assert create_tenant_index(pgvector_engine, organization_id) is False
    other = organization_id + 1
    with pgvector_engine.connect() as connection:
        transaction = connection.begin()
        session = Session(bind=connection, join_transaction_mode="create_savepoint")
        try:
            assert organization_id in tenant_indexes(session)
            maker = TextMaker(seed=5, length=(20, 30))
            texts = load_corpus(session, {organization_id: 60, other: 60}, maker)
            own = set(
                session.scalars(
                    text("SELECT id FROM api2.kb_chunks WHERE organization_id = :org"),
                    {"org": organization_id},
                )
            )
            vector = EMBEDDER.embed([maker.query(texts[organization_id][0])])[0]

            # When: each tenant's vector ranking is forced onto the HNSW path.
            mine = vector_search(
                session,
                scope=SearchScope(organization_id),
                vector=vector,
                limit=10,
                exact_threshold=0,
            )
            after_mine = scans_of(session, index_name(organization_id))
            vector_search(
                session, scope=SearchScope(other), vector=vector, limit=10, exact_threshold=0
            )
            after_other = scans_of(session, index_name(organization_id))
        finally:
            session.close()
            transaction.rollback()

    # Then: the tenant's search walked its own index and found only its chunks; the other
    # tenant's did not touch that index.
    assert mine.path == VectorPath.HNSW
    assert len(mine.chunks) == 10 and {chunk_id for chunk_id, _ in mine.chunks} <= own
    assert after_mine >= 1
    assert after_other == after_mine


def test_dropping_a_tenants_index(pgvector_engine: Engine, organization_id: int) -> None:
    create_tenant_index(pgvector_engine, organization_id)

    assert drop_tenant_index(pgvector_engine, organization_id) is True
    assert drop_tenant_index(pgvector_engine, organization_id) is False
    with Session(pgvector_engine) as session:
        assert organization_id not in tenant_indexes(session)


def test_index_names_need_an_organization_id() -> None:
    assert index_name(42) == "ix_kb_chunks_hnsw_org_42"
    with pytest.raises(TypeError):
        index_name(True)
    with pytest.raises(ValueError):
        index_name(0)


def test_the_cli_refuses_a_tenant_index_without_pgvector(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, database_url: str, namespace: str
) -> None:
    # The default test server stores embeddings as float8[]: there is nothing to index.
    for name, value in {
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_ENV": "test",
    }.items():
        monkeypatch.setenv(name, value)
    runner = CliRunner()

    listed = runner.invoke(main, ["ingestion", "tenant-index"])
    refused = runner.invoke(main, ["ingestion", "tenant-index", "--organization", "7"])

    assert listed.exit_code == 0, listed.output
    assert "no organization has an index of its own" in listed.output
    assert refused.exit_code == 1
    assert "not a pgvector column" in refused.output
