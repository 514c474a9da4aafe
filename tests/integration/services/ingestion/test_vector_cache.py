"""Retrieval's vector cache (:mod:`services.ingestion.vector_cache`) on the embedded
PostgreSQL with pgvector: committed data, other connections writing, the change log."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from services.indexing.embedders import HashingEmbedder
from services.ingestion import vector_cache, vector_ranking
from services.ingestion.search import SearchScope, VectorPath, search, vector_search
from services.ingestion.vector_cache import TenantVectors, VectorCache
from tests.integration.services.ingestion.test_search import Tenant

EMBEDDER = HashingEmbedder()
WORDS = [
    "river",
    "forest",
    "quoll",
    "marsh",
    "heath",
    "ridge",
    "valley",
    "creek",
    "canyon",
    "delta",
    "lagoon",
    "dune",
]


@pytest.fixture
def engine(pgvector_engine: Engine) -> Iterator[Engine]:
    vector_cache.configure(vector_cache.DEFAULT_CACHE_MB)
    yield pgvector_engine
    vector_cache.configure(vector_cache.DEFAULT_CACHE_MB)


def texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(8)) + f" note {i}" for i in range(count)]


def committed_tenant(engine: Engine, chunks: list[str], **options: object) -> Tenant:
    with Session(engine) as session:
        tenant = Tenant(session)
        base = tenant.base()
        tenant.document(base, chunks, **options)  # type: ignore[arg-type]
        session.commit()
    return tenant


def ranked(
    engine: Engine, organization_id: int, query: str, limit: int = 10
) -> list[tuple[int, float]]:
    with Session(engine) as session:
        found = vector_search(
            session,
            scope=SearchScope(organization_id),
            vector=EMBEDDER.embed([query])[0],
            limit=limit,
        )
    assert found.path == VectorPath.EXACT
    return found.chunks


def ranking(engine: Engine, organization_id: int, query: str, limit: int = 10) -> list[int]:
    return [chunk_id for chunk_id, _ in ranked(engine, organization_id, query, limit)]


def sql_ranked(
    engine: Engine, organization_id: int, query: str, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[int, float]]:
    vector_cache.configure(0)
    try:
        return ranked(engine, organization_id, query)
    finally:
        vector_cache.configure(vector_cache.DEFAULT_CACHE_MB)


def assert_same_ranking(answer: list[tuple[int, float]], truth: list[tuple[int, float]]) -> None:
    """The same ranking up to ties (these corpora have many equal distances): the same
    distance at every rank, and the same chunks wherever no tie crosses the cut."""
    assert [d for _, d in answer] == pytest.approx([d for _, d in truth], abs=1e-5)
    clear = {i for i, d in truth if d < truth[-1][1] - 1e-5}
    assert clear <= {i for i, _ in answer}


def cached(engine: Engine, organization_id: int) -> TenantVectors | None:
    with Session(engine) as session:
        cache = vector_cache.cache_for(session)
    assert cache is not None
    return cache.get(organization_id)


def test_the_cached_ranking_is_the_sql_ranking_and_is_read_once(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = committed_tenant(engine, texts(600, seed=1))
    committed_tenant(engine, texts(300, seed=2))  # another tenant, never a candidate
    queries = [" ".join(random.Random(q).choices(WORDS, k=4)) for q in range(20)]
    expected = [sql_ranked(engine, tenant.organization_id, q, monkeypatch) for q in queries]

    answers = [ranked(engine, tenant.organization_id, query) for query in queries]
    entry = cached(engine, tenant.organization_id)
    again = ranked(engine, tenant.organization_id, queries[0])

    assert entry is not None and len(entry.ids) == 600
    assert cached(engine, tenant.organization_id) is entry  # not read again
    assert again == answers[0]
    for answer, truth in zip(answers, expected, strict=True):
        assert_same_ranking(answer, truth)


def add_nearest(engine: Engine, organization_id: int, query: str) -> int:
    """Commit, from another connection, a chunk that is ``query`` itself; its id."""
    with Session(engine) as other:
        writer = Tenant(other, organization_id)
        added = writer.document(writer.base(f"kb-{random.getrandbits(30)}"), [query])
        other.commit()
        return int(
            other.scalar(text("SELECT id FROM api2.kb_chunks WHERE document_id = :d"), {"d": added})
        )


def test_a_chunk_another_connection_commits_is_ranked_by_the_next_search(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vector_ranking, "RELOAD_INTERVAL_SECONDS", 0.0)
    tenant = committed_tenant(engine, texts(200, seed=3))
    query = "wombat burrow wombat burrow"
    before = ranking(engine, tenant.organization_id, query)
    entry = cached(engine, tenant.organization_id)

    new_chunk = add_nearest(engine, tenant.organization_id, query)
    after = ranking(engine, tenant.organization_id, query)

    assert new_chunk not in before
    assert after[0] == new_chunk
    assert cached(engine, tenant.organization_id) is not entry  # read again


def rankings_by_source() -> dict[str, float]:
    return {
        source: vector_ranking.RANKINGS.labels(source)._value.get()
        for source in ("kept", "read", "sql")
    }


def test_a_tenant_changed_soon_after_its_read_is_ranked_in_sql_until_it_settles(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vector_ranking, "RELOAD_INTERVAL_SECONDS", 3600.0)
    tenant = committed_tenant(engine, texts(200, seed=11))
    query = "echidna spines echidna spines"
    start = rankings_by_source()
    ranking(engine, tenant.organization_id, query)
    ranking(engine, tenant.organization_id, query)
    entry = cached(engine, tenant.organization_id)

    new_chunk = add_nearest(engine, tenant.organization_id, query)
    meanwhile = ranking(engine, tenant.organization_id, query)
    kept = cached(engine, tenant.organization_id)
    monkeypatch.setattr(vector_ranking, "RELOAD_INTERVAL_SECONDS", 0.0)
    settled = ranking(engine, tenant.organization_id, query)
    counted = {k: v - start[k] for k, v in rankings_by_source().items()}

    assert meanwhile[0] == new_chunk and settled[0] == new_chunk
    assert kept is entry  # not re-read on the first change
    assert cached(engine, tenant.organization_id) is not entry
    assert counted == {"read": 2, "kept": 1, "sql": 1}


def test_deleted_chunks_and_hidden_audiences_never_come_back_from_the_cache(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The nearest 150 chunks are staff-only: a public search widens its candidates past
    them and answers the SQL path's ranking; a deleted chunk leaves it at once."""
    query = "lagoon dune lagoon dune"
    tenant = committed_tenant(
        engine, [f"{query} staff {i}" for i in range(150)], audience=["staff"]
    )
    with Session(engine) as session:
        writer = Tenant(session, tenant.organization_id)
        writer.document(writer.base("public"), texts(300, seed=4))
        session.commit()
    public = ranked(engine, tenant.organization_id, query)
    assert_same_ranking(public, sql_ranked(engine, tenant.organization_id, query, monkeypatch))
    ranking(engine, tenant.organization_id, query)  # cached again
    with Session(engine) as session:
        staff_only = set(
            session.scalars(
                text(
                    "SELECT id FROM api2.kb_chunks WHERE organization_id = :o AND audience <> '{}'"
                ),
                {"o": tenant.organization_id},
            )
        )
        session.execute(text("DELETE FROM api2.kb_chunks WHERE id = :id"), {"id": public[0][0]})
        session.commit()

    after = ranked(engine, tenant.organization_id, query)

    assert len(staff_only) == 150 and not staff_only & {i for i, _ in public}
    assert public[0][0] not in {i for i, _ in after}
    assert [d for _, d in after[:9]] == pytest.approx([d for _, d in public[1:]], abs=1e-5)


def test_a_transactions_own_uncommitted_chunks_are_ranked_for_it_alone(engine: Engine) -> None:
    tenant = committed_tenant(engine, texts(100, seed=5))
    query = "numbat termite numbat termite"
    ranking(engine, tenant.organization_id, query)
    entry = cached(engine, tenant.organization_id)

    with Session(engine) as session:
        writer = Tenant(session, tenant.organization_id)
        writer.document(writer.base("draft"), [query])
        own = session.scalar(text("SELECT max(id) FROM api2.kb_chunks"))
        inside = vector_search(
            session,
            scope=SearchScope(tenant.organization_id),
            vector=EMBEDDER.embed([query])[0],
            limit=5,
        )
        kept_meanwhile = cached(engine, tenant.organization_id)
        session.rollback()
    outside = ranking(engine, tenant.organization_id, query)

    assert inside.chunks[0][0] == own
    assert own not in outside
    assert kept_meanwhile is None or kept_meanwhile is entry  # the uncommitted read not kept


def test_a_search_through_the_cache_answers_as_a_hybrid_search(engine: Engine) -> None:
    tenant = committed_tenant(engine, ["Platypus venom is mild for humans.", *texts(50, seed=6)])
    with Session(engine) as session:
        hits = search(
            session,
            organization_id=tenant.organization_id,
            knowledge_base_id=None,
            query="platypus venom",
            embedder=EMBEDDER,
        )
    assert hits[0].content.startswith("Platypus venom")
    assert hits[0].vector_rank == 1 and hits[0].text_rank == 1
    assert cached(engine, tenant.organization_id) is not None


def test_the_change_log_has_one_row_per_writing_transaction(engine: Engine) -> None:
    tenant = committed_tenant(engine, texts(10, seed=7))
    with Session(engine) as session:
        rows = session.execute(
            text("SELECT count(*) FROM api2.kb_chunk_changes WHERE organization_id = :o"),
            {"o": tenant.organization_id},
        ).scalar_one()
        session.execute(
            text("UPDATE api2.kb_chunks SET audience = '{x}' WHERE organization_id = :o"),
            {"o": tenant.organization_id},
        )
        session.execute(
            text("DELETE FROM api2.kb_chunks WHERE organization_id = :o AND position = 0"),
            {"o": tenant.organization_id},
        )
        session.commit()
        after = session.execute(
            text("SELECT count(*) FROM api2.kb_chunk_changes WHERE organization_id = :o"),
            {"o": tenant.organization_id},
        ).scalar_one()
    assert (rows, after) == (1, 2)


def test_old_change_rows_are_pruned_by_a_later_writer(engine: Engine) -> None:
    tenant = committed_tenant(engine, texts(3, seed=10))
    with Session(engine) as session:
        session.execute(
            text(
                "INSERT INTO api2.kb_chunk_changes (organization_id, txid, changed_at) "
                "VALUES (:o, 1, now() - interval '2 days')"
            ),
            {"o": tenant.organization_id},
        )
        session.commit()
    for _ in range(500):  # until a transaction id prunes (one in 64)
        with Session(engine) as session:
            txid = session.scalar(text("SELECT pg_current_xact_id()::text::bigint"))
            if txid % 64:
                session.rollback()
                continue
            session.execute(
                text("UPDATE api2.kb_chunks SET audience = '{}' WHERE organization_id = :o"),
                {"o": tenant.organization_id},
            )
            session.commit()
            break
    with Session(engine) as session:
        left = session.scalars(
            text("SELECT txid FROM api2.kb_chunk_changes WHERE organization_id = :o"),
            {"o": tenant.organization_id},
        ).all()
    assert 1 not in left and txid in left and len(left) == 2


def test_a_truncate_marks_every_tenant_changed(engine: Engine) -> None:
    tenant = committed_tenant(engine, texts(20, seed=9))
    query = "creek canyon"
    ranking(engine, tenant.organization_id, query)
    entry = cached(engine, tenant.organization_id)
    assert entry is not None
    with Session(engine) as session:  # rolled back: the other tests' rows stay
        session.execute(text("TRUNCATE api2.kb_chunks"))
        marked = session.scalar(
            text("SELECT count(*) FROM api2.kb_chunk_changes WHERE organization_id = 0")
        )
        empty = vector_search(
            session,
            scope=SearchScope(tenant.organization_id),
            vector=EMBEDDER.embed([query])[0],
            limit=5,
        )
        session.rollback()
    assert marked == 1 and empty.chunks == []


def test_the_cache_keeps_its_byte_budget_least_recently_used_first() -> None:
    def entry(rows: int) -> TenantVectors:
        return TenantVectors(
            snapshot="1:1:",
            loaded_at=0.0,
            ids=np.arange(rows, dtype=np.int64),
            bases=np.zeros(rows, dtype=np.int64),
            unit=np.zeros((rows, 4), dtype=np.float32),
        )

    cache = VectorCache(max_bytes=entry(10).nbytes * 2)
    cache.put(1, entry(10))
    cache.put(2, entry(10))
    cache.get(1)
    cache.put(3, entry(10))
    cache.put(4, entry(100))  # larger than the whole budget: never kept

    assert cache.get(1) is not None and cache.get(3) is not None
    assert cache.get(2) is None and cache.get(4) is None
    assert cache.nbytes == entry(10).nbytes * 2
    held = vector_cache.CACHE_BYTES._value.get()
    cache.clear()
    assert (
        cache.nbytes == 0 and vector_cache.CACHE_BYTES._value.get() == held - entry(10).nbytes * 2
    )


def test_the_budget_is_checked_and_applies_to_new_caches(engine: Engine) -> None:
    with pytest.raises(ValueError, match="search cache budget"):
        vector_cache.configure(-1)
    vector_cache.configure(0.5)
    with Session(engine) as session:
        cache = vector_cache.cache_for(session)
    assert cache is not None and cache.max_bytes == 512 * 1024
    vector_cache.configure(0)
    with Session(engine) as session:
        assert vector_cache.cache_for(session) is None


def test_another_dimension_is_not_read_into_the_cache(engine: Engine) -> None:
    tenant = committed_tenant(engine, texts(5, seed=8))
    with Session(engine) as session:
        entry, _ = vector_ranking.load(session, tenant.organization_id, dims=128)
    assert entry is None
