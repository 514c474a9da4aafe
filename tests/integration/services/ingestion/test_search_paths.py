""":func:`services.ingestion.search.search` on its HNSW path (one pipelined round trip under
the index path's settings) against its exact path, on the embedded PostgreSQL with
pgvector; rows are loaded in a transaction rolled back after each test."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from services.indexing.embedders import HashingEmbedder
from services.ingestion.search import search
from testkit.search_corpus import TextMaker, load_corpus

EMBEDDER = HashingEmbedder()
SETTINGS = ("enable_sort", "plan_cache_mode", "hnsw.ef_search", "hnsw.iterative_scan")


@pytest.fixture
def session(pgvector_engine: Engine) -> Iterator[Session]:
    with pgvector_engine.connect() as connection:
        transaction = connection.begin()
        session = Session(bind=connection, join_transaction_mode="create_savepoint")
        try:
            yield session
        finally:
            session.close()
            transaction.rollback()


def settings(session: Session) -> dict[str, str | None]:
    return {
        name: session.execute(text("SELECT current_setting(:n, true)"), {"n": name}).scalar()
        for name in SETTINGS
    }


def test_the_hnsw_path_answers_a_small_tenant_as_the_exact_path_does(session: Session) -> None:
    # Given: two tenants of 40 chunks; the index walk can reach all of a small tenant's.
    tenant = random.randrange(10**12, 2**62)
    maker = TextMaker(seed=21, length=(20, 30))
    texts = load_corpus(session, {tenant: 40, tenant + 1: 40}, maker)
    queries = [maker.query(texts[tenant][i]) for i in (0, 7, 19)]
    before = settings(session)

    for query in queries:
        # When
        exact = search(
            session, organization_id=tenant, knowledge_base_id=None, query=query,
            embedder=EMBEDDER,
        )  # fmt: skip
        indexed = search(
            session, organization_id=tenant, knowledge_base_id=None, query=query,
            embedder=EMBEDDER, exact_threshold=0,
        )  # fmt: skip

        # Then: the same hits, ranks, scores and snippets.
        assert indexed == exact
        assert len(exact) == 10

    # Then: no setting of the index path is left behind and its savepoint is gone.
    assert settings(session) == before
    with pytest.raises(DBAPIError), session.begin_nested():
        session.execute(text("ROLLBACK TO SAVEPOINT search_settings"))
    assert session.execute(text("SELECT count(*) FROM api2.kb_chunks")).scalar_one() >= 80
