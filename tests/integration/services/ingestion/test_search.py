"""Hybrid retrieval (:mod:`services.ingestion.search`) on both embedding storages: pgvector
(the embedded PostgreSQL 18) and the ``float8[]`` fallback (the default test server).

Rows are inserted directly (a base, documents in the wanted state, chunks embedded with the
hashing embedder) in a transaction rolled back after each test, under organization ids no
other test uses. The recall test loads 30,000 chunks into the pgvector database inside its
transaction (the HNSW index is dropped for the load and rebuilt, all rolled back).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from services.indexing.embedders import HashingEmbedder
from services.ingestion.search import (
    SNIPPET_CHARS,
    SearchHit,
    SearchScope,
    VectorPath,
    fuse,
    search,
    text_search,
    vector_search,
)
from shared.db.models.ingestion import KbChunk, KbDocument, KnowledgeBase
from shared.db.vector import embedding_storage
from testkit.search_corpus import (
    HNSW_INDEX,
    HNSW_INDEX_SQL,
    TextMaker,
    exact_neighbours,
    load_corpus,
    naive_nearest,
    organization_sizes,
    recall,
)

EMBEDDER = HashingEmbedder()


@pytest.fixture(params=["pgvector", "float8[]"])
def db(request: pytest.FixtureRequest) -> Iterator[Session]:
    """A session on one storage, rolled back after the test."""
    engine: Engine = request.getfixturevalue(
        "pgvector_engine" if request.param == "pgvector" else "engine"
    )
    with engine.connect() as connection:
        transaction = connection.begin()
        session = Session(bind=connection, join_transaction_mode="create_savepoint")
        try:
            assert embedding_storage(session).kind == (
                "vector" if request.param == "pgvector" else "float8[]"
            )
            yield session
        finally:
            session.close()
            transaction.rollback()


def new_organization_id() -> int:
    return random.randrange(10**12, 2**62)


class Tenant:
    """One organization's bases, documents and chunks, written straight to the tables."""

    def __init__(self, session: Session, organization_id: int | None = None) -> None:
        self.session = session
        self.organization_id = organization_id or new_organization_id()

    def base(self, name: str = "kb") -> int:
        base = KnowledgeBase(organization_id=self.organization_id, name=name)
        self.session.add(base)
        self.session.flush()
        return base.id

    def document(
        self,
        base_id: int,
        chunks: Sequence[str],
        *,
        status: str = "ready",
        audience: Sequence[str] = (),
        deleted: bool = False,
    ) -> int:
        document = KbDocument(
            organization_id=self.organization_id,
            knowledge_base_id=base_id,
            name=f"doc-{random.getrandbits(40)}",
            kind="text",
            status=status,
            audience=list(audience),
            current_version=1,
            deleted_at=datetime.now(UTC) if deleted else None,
        )
        self.session.add(document)
        self.session.flush()
        for position, (content, vector) in enumerate(
            zip(chunks, EMBEDDER.embed(chunks), strict=True)
        ):
            self.session.add(
                KbChunk(
                    organization_id=self.organization_id,
                    knowledge_base_id=base_id,
                    document_id=document.id,
                    position=position,
                    content=content,
                    token_count=len(content.split()),
                    embedding=vector,
                    audience=list(audience),
                )
            )
        self.session.flush()
        return document.id

    def search(self, query: str, base_id: int | None = None, **options: Any) -> list[SearchHit]:
        return search(
            self.session,
            organization_id=self.organization_id,
            knowledge_base_id=base_id,
            query=query,
            embedder=EMBEDDER,
            **options,
        )


def documents_of(hits: Sequence[SearchHit]) -> set[int]:
    return {hit.document_id for hit in hits}


FILLER = [
    "Invoices are sent on the first day of each month to the billing contact.",
    "The mobile app supports offline mode for reading saved articles.",
    "Our office is closed on public holidays; support answers by email.",
    "Export your data as CSV from the reports page.",
]


# -- ranking ------------------------------------------------------------------------------


def test_the_chunk_with_the_exact_phrase_ranks_first(db: Session) -> None:
    tenant = Tenant(db)
    base = tenant.base()
    scattered = tenant.document(
        base,
        [
            "Your account page lists devices. To reset a router, hold its button; the "
            "password manager can also store your wifi password.",
        ],
    )
    exact = tenant.document(
        base,
        ["To reset your password, open account settings and choose reset your password."],
    )
    tenant.document(base, FILLER)

    hits = tenant.search("reset your password")

    assert hits[0].document_id == exact
    assert (hits[0].vector_rank, hits[0].text_rank) == (1, 1)
    assert "**reset** **your** **password**" in hits[0].snippet
    assert scattered in documents_of(hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].knowledge_base_id == base and hits[0].position == 0


def test_a_quoted_phrase_matches_only_chunks_with_that_phrase(db: Session) -> None:
    tenant = Tenant(db)
    base = tenant.base()
    phrase = tenant.document(base, ["Refunds take five business days to appear."])
    tenant.document(base, ["Business hours are nine to five; refunds are handled on days off."])

    hits = tenant.search('"five business days"')

    assert [h.document_id for h in hits if h.text_rank is not None] == [phrase]


def test_a_vector_only_match_gets_the_chunk_opening_as_snippet(db: Session) -> None:
    tenant = Tenant(db)
    base = tenant.base()
    long_text = "Password rules: " + " ".join(f"word{i}" for i in range(120))
    tenant.document(base, [long_text])

    # Both words are needed for a text match; the vector matches on "password" alone.
    [hit] = tenant.search("password zeppelin")

    assert (hit.vector_rank, hit.text_rank) == (1, None)
    assert hit.snippet.startswith("Password rules: word0 word1")
    assert hit.snippet.endswith(" …") and len(hit.snippet) <= SNIPPET_CHARS + 2


def test_a_hit_carries_its_whole_chunk_and_its_documents_name_and_version(db: Session) -> None:
    tenant = Tenant(db)
    base = tenant.base()
    long_text = "Refund policy: " + " ".join(f"clause{i}" for i in range(300))
    document_id = tenant.document(base, [long_text, "Shipping takes a week."])
    document = db.get(KbDocument, document_id)
    assert document is not None
    document.current_version = 3
    db.flush()

    hits = tenant.search("refund policy clause7")

    top = hits[0]
    assert top.document_id == document_id and top.position == 0
    assert top.content == long_text  # the whole chunk, not a 240-character snippet
    assert len(top.snippet) < len(top.content)
    assert (top.document_name, top.document_version) == (document.name, 3)


def test_top_k_limits_the_answer_and_empty_queries_find_nothing(db: Session) -> None:
    tenant = Tenant(db)
    base = tenant.base()
    tenant.document(base, [f"alpaca fact number {i}" for i in range(8)])

    assert len(tenant.search("alpaca fact", top_k=3)) == 3
    assert tenant.search("  ?! ") == []
    with pytest.raises(ValueError, match="top_k"):
        tenant.search("alpaca", top_k=0)
    with pytest.raises(TypeError, match="audience"):
        tenant.search("alpaca", audience="staff")


def test_fusion_adds_reciprocal_ranks() -> None:
    fused = fuse([{1: 1, 2: 2, 3: 3}, {3: 1, 1: 2}])

    assert [chunk_id for chunk_id, _ in fused] == [1, 3, 2]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62)
    assert fused[2][1] == pytest.approx(1 / 62)


# -- filters ------------------------------------------------------------------------------


def test_another_organization_never_sees_a_chunk_even_naming_its_base(db: Session) -> None:
    a, b = Tenant(db), Tenant(db)
    a_base, b_base = a.base(), b.base()
    a_doc = a.document(a_base, ["The vault code is platypus secret seven."])
    b_doc = b.document(b_base, ["Platypus facts for the team wiki."])

    assert documents_of(b.search("platypus secret seven", top_k=50)) == {b_doc}
    assert b.search("platypus secret seven", a_base) == []
    assert b.search("platypus", audience=["staff", "admin"]) != []
    assert documents_of(a.search("platypus secret seven")) == {a_doc}
    scope_b = SearchScope(b.organization_id, a_base)
    assert (
        vector_search(db, scope=scope_b, vector=EMBEDDER.embed(["platypus"])[0], limit=10).chunks
        == []
    )


def test_audience_restricted_chunks_need_a_shared_label(db: Session) -> None:
    tenant = Tenant(db)
    base = tenant.base()
    public = tenant.document(base, ["Holiday calendar for everyone."])
    staff = tenant.document(base, ["Holiday bonus policy."], audience=["staff"])
    leads = tenant.document(base, ["Holiday rota for team leads."], audience=["leads", "admin"])

    assert documents_of(tenant.search("holiday")) == {public}
    assert documents_of(tenant.search("holiday", audience=["staff"])) == {public, staff}
    assert documents_of(tenant.search("holiday", audience=["admin", "x"])) == {public, leads}
    assert documents_of(tenant.search("holiday", audience=["staff", "leads"])) == {
        public,
        staff,
        leads,
    }


def test_live_documents_are_searched_on_their_current_chunks_whatever_their_status(
    db: Session,
) -> None:
    # A document has chunks only once a version of it was indexed: a re-upload being
    # processed, or whose new content failed, is searched on its last good version.
    tenant = Tenant(db)
    base = tenant.base()
    ready = tenant.document(base, ["Kangaroo care guide."])
    reprocessing = tenant.document(base, ["Kangaroo care guide, v1."], status="processing")
    failed_update = tenant.document(base, ["Kangaroo care guide, v2."], status="failed")
    tenant.document(base, ["Kangaroo care guide, removed."], deleted=True)

    found = documents_of(tenant.search("kangaroo care guide", top_k=50))
    assert found == {ready, reprocessing, failed_update}


@pytest.mark.parametrize("exact_threshold", [50_000, 0], ids=["exact", "hnsw"])
def test_a_deleted_documents_chunks_are_out_of_every_ranking(
    db: Session, exact_threshold: int
) -> None:
    # Deleting a document deletes its chunks too (store/deletions.py); here they are left
    # in place, so the visibility criteria alone keep them out, on both vector paths.
    tenant = Tenant(db)
    base = tenant.base()
    live = tenant.document(base, ["Platypus eggs hatch after ten days."])
    deleted = tenant.document(base, ["Platypus eggs are leathery."], deleted=True)
    scope = SearchScope(tenant.organization_id, base)

    hits = tenant.search("platypus eggs", base, top_k=50, exact_threshold=exact_threshold)
    nearest = vector_search(
        db, scope=scope, vector=EMBEDDER.embed(["platypus eggs"])[0], limit=50,
        exact_threshold=exact_threshold,
    )  # fmt: skip
    by_text = text_search(db, scope=scope, query="platypus eggs", limit=50)

    assert documents_of(hits) == {live}
    chunk_documents = dict(
        db.execute(
            text("SELECT id, document_id FROM api2.kb_chunks WHERE organization_id = :o"),
            {"o": tenant.organization_id},
        ).all()
    )
    assert {chunk_documents[i] for i, _ in nearest.chunks} == {live}
    assert {chunk_documents[i] for i in by_text} == {live}
    assert deleted not in documents_of(hits)


def test_the_knowledge_base_filter(db: Session) -> None:
    tenant = Tenant(db)
    first, second = tenant.base("first"), tenant.base("second")
    in_first = tenant.document(first, ["Wombat burrows are cube shaped."])
    in_second = tenant.document(second, ["Wombat diet is grass."])

    assert documents_of(tenant.search("wombat", first)) == {in_first}
    assert documents_of(tenant.search("wombat", second)) == {in_second}
    assert documents_of(tenant.search("wombat")) == {in_first, in_second}


def test_both_vector_paths_filter_alike_and_leave_no_setting_behind(db: Session) -> None:
    tenant, other = Tenant(db), Tenant(db)
    base = tenant.base()
    texts = [f"quoll habitat note {i} about forests and rivers" for i in range(30)]
    tenant.document(base, texts[:20])
    tenant.document(base, texts[20:], audience=["staff"])
    other.document(other.base(), texts)
    vector = EMBEDDER.embed(["quoll habitat forests"])[0]
    scope = SearchScope(tenant.organization_id)
    before = db.execute(text("SELECT current_setting('enable_sort')")).scalar_one()

    exact = vector_search(db, scope=scope, vector=vector, limit=25)
    indexed = vector_search(db, scope=scope, vector=vector, limit=25, exact_threshold=0)

    expected = VectorPath.EXACT if embedding_storage(db).is_pgvector else VectorPath.FLOAT_ARRAY
    assert exact.path == expected
    assert indexed.path == (VectorPath.HNSW if expected == VectorPath.EXACT else expected)
    assert len(exact.chunks) == 20
    own = set(
        db.scalars(
            text("SELECT id FROM api2.kb_chunks WHERE organization_id = :org AND audience = '{}'"),
            {"org": tenant.organization_id},
        )
    )
    assert {chunk_id for chunk_id, _ in indexed.chunks} <= own
    distances = [d for _, d in indexed.chunks]
    assert distances == sorted(distances)
    assert db.execute(text("SELECT current_setting('enable_sort')")).scalar_one() == before


# -- recall at scale (pgvector) -----------------------------------------------------------


@pytest.fixture
def pgvector_session(pgvector_engine: Engine) -> Iterator[Session]:
    with pgvector_engine.connect() as connection:
        transaction = connection.begin()
        session = Session(bind=connection, join_transaction_mode="create_savepoint")
        try:
            yield session
        finally:
            session.close()
            transaction.rollback()


def test_tenant_filtered_vector_recall_at_10_against_exact_search(
    pgvector_session: Session,
) -> None:
    """30,000 chunks over 20 organizations; the queried one holds 1,500. Over 50 queries the
    planned (exact) path keeps recall@10 >= 0.95; the HNSW path, forced by a lower
    threshold, answers from the organization only and recovers most of what filtering
    after the index loses (the hashing embedder's lexical space is hard for HNSW itself)."""
    # Given: the corpus, loaded without the index, which is then built over it (an HNSW
    # insert per row would take minutes); all of it is rolled back with the test.
    session = pgvector_session
    first = new_organization_id()
    sizes = organization_sizes(30_000, 20, {0: 1_500}, first_id=first)
    maker = TextMaker(seed=11, length=(20, 40))
    session.execute(text(f"DROP INDEX api2.{HNSW_INDEX}"))
    texts = load_corpus(session, sizes, maker, embedder=EMBEDDER)
    session.execute(text("SET LOCAL maintenance_work_mem = '256MB'"))
    session.execute(text(HNSW_INDEX_SQL))
    session.execute(text("ANALYZE api2.kb_chunks"))
    own = set(
        session.scalars(
            text("SELECT id FROM api2.kb_chunks WHERE organization_id = :org"), {"org": first}
        )
    )
    queries = [maker.query(maker.rng.choice(texts[first])) for _ in range(50)]
    scope = SearchScope(first)

    # When: each query is ranked exactly, as planned, on the HNSW path, and naively.
    recalls: dict[str, list[float]] = {"planned": [], "hnsw": [], "naive": []}
    for query in queries:
        vector = EMBEDDER.embed([query])[0]
        truth = exact_neighbours(session, first, vector, 10)
        planned = vector_search(session, scope=scope, vector=vector, limit=10)
        forced = vector_search(session, scope=scope, vector=vector, limit=10, exact_threshold=1_000)
        naive = naive_nearest(session, first, vector, 10)

        assert planned.path == VectorPath.EXACT and forced.path == VectorPath.HNSW
        assert len(forced.chunks) == 10 and {i for i, _ in forced.chunks} <= own
        recalls["planned"].append(recall(planned.chunks, truth))
        recalls["hnsw"].append(recall(forced.chunks, truth))
        recalls["naive"].append(recall(naive, truth))

    # Then
    mean = {name: sum(values) / len(values) for name, values in recalls.items()}
    assert mean["planned"] >= 0.95, mean
    assert mean["hnsw"] >= 0.75 and mean["hnsw"] > mean["naive"], mean
