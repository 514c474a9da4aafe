"""The api2 ``kb_chunks`` writer: one COPY per chunk set, storing what an INSERT stored."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, event, insert, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.indexing.chunk_batches import embed_chunks
from services.indexing.chunking import Chunk
from services.indexing.embedders import HashingEmbedder
from services.indexing.kb_chunks import replace_kb_chunks
from services.ingestion import store
from shared.db.models.ingestion import KbChunk
from shared.db.vector import has_pgvector
from tests.fixtures_db import joined_session
from tests.integration.services.ingestion.factories import new_org

CREATED_AT = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
AUDIENCE = ["support", "sales"]


@pytest.fixture(params=["fallback", "pgvector"])
def any_session(request: pytest.FixtureRequest) -> Iterator[Session]:
    """A rolled-back session on either storage: ``float8[]`` (default server) and pgvector."""
    engine: Engine = request.getfixturevalue(
        "engine" if request.param == "fallback" else "pgvector_engine"
    )
    yield from joined_session(engine)


@pytest.fixture
def pg_session(pgvector_engine: Engine) -> Iterator[Session]:
    """A rolled-back session on the pgvector database."""
    yield from joined_session(pgvector_engine)


def new_document(session: Session, org: int, name: str = "doc") -> tuple[int, int]:
    """A document of a new knowledge base of ``org``: (knowledge base id, document id)."""
    base = store.create_knowledge_base(session, organization_id=org, name="Help center")
    added = store.add_document(
        session,
        organization_id=org,
        knowledge_base_id=base.id,
        name=name,
        source=store.TextSource("text"),
    )
    return base.id, added.document.id


def chunks_of(count: int, word: str = "refund") -> list[Chunk]:
    return [
        Chunk(position=i, content=f"{word} {i}: Ünïcode, tabs\tand\nnew lines ☃", token_count=i + 3)
        for i in range(count)
    ]


def replace(
    session: Session, org: int, base: int, doc: int, chunks: list[Chunk], **kw: Any
) -> None:
    replace_kb_chunks(
        session,
        organization_id=org,
        knowledge_base_id=base,
        document_id=doc,
        chunks=chunks,
        vectors=embed_chunks(HashingEmbedder(), chunks),
        audience=kw.get("audience", AUDIENCE),
        created_at=kw.get("created_at", CREATED_AT),
    )


def stored(session: Session, org: int, doc: int) -> list[tuple[Any, ...]]:
    """Every stored column of the document's chunks but the id and document, as text where
    the column is a vector (so the comparison is exact)."""
    half = "embedding_half::text" if has_pgvector(session) else "NULL"
    rows = session.execute(
        text(
            "SELECT organization_id, knowledge_base_id, position, content, token_count, "
            f"embedding::text, {half}, audience, content_tsv::text, created_at "
            "FROM api2.kb_chunks WHERE organization_id = :org AND document_id = :doc "
            "ORDER BY position"
        ),
        {"org": org, "doc": doc},
    )
    return [tuple(row) for row in rows]


def test_copied_rows_are_exactly_what_an_insert_of_the_same_values_stores(
    any_session: Session,
) -> None:
    # Given two documents, one written by the writer and one by a plain INSERT of the same
    session, org = any_session, new_org()
    base, copied = new_document(session, org, "copied")
    _, inserted = new_document(session, org, "inserted")
    chunks = chunks_of(5)
    vectors = embed_chunks(HashingEmbedder(), chunks)

    replace(session, org, base, copied, chunks)
    session.execute(
        insert(KbChunk),
        [
            {
                "organization_id": org,
                "knowledge_base_id": base,
                "document_id": inserted,
                "position": chunk.position,
                "content": chunk.content,
                "token_count": chunk.token_count,
                "embedding": list(vector),
                "audience": AUDIENCE,
                "created_at": CREATED_AT,
            }
            for chunk, vector in zip(chunks, vectors, strict=True)
        ],
    )

    # Then every column is the same, the vectors and generated columns to the last bit
    assert stored(session, org, copied) == stored(session, org, inserted)
    assert len(stored(session, org, copied)) == 5
    ids = session.scalars(
        select(KbChunk.id).where(KbChunk.document_id == copied).order_by(KbChunk.position)
    ).all()
    assert len(set(ids)) == 5 and all(isinstance(i, int) for i in ids)


def test_a_chunk_set_of_any_size_is_one_delete_and_one_copy(any_session: Session) -> None:
    session, org = any_session, new_org()
    base, doc = new_document(session, org)
    replace(session, org, base, doc, chunks_of(3, "old"))
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    # When 1,200 chunks replace three
    engine = session.get_bind().engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        replace(session, org, base, doc, chunks_of(1_200))
    finally:
        event.remove(engine, "before_cursor_execute", record)

    # Then SQLAlchemy ran the DELETE alone (the rows went by COPY, not INSERT statements)
    assert [s.split()[0] for s in statements if "kb_chunks" in s] == ["DELETE"]
    rows = stored(session, org, doc)
    assert [row[2] for row in rows] == list(range(1_200))
    assert rows[7][3] == chunks_of(8)[7].content and rows[7][4] == 10


def test_a_replacement_touches_only_its_own_document(any_session: Session) -> None:
    session, org, other_org = any_session, new_org(), new_org()
    base, doc = new_document(session, org, "a")
    _, sibling = new_document(session, org, "b")
    other_base, other = new_document(session, other_org, "a")
    replace(session, org, base, doc, chunks_of(2, "mine"))
    replace(session, org, base, sibling, chunks_of(2, "sibling"))
    replace(session, other_org, other_base, other, chunks_of(2, "theirs"))

    replace(session, org, base, doc, chunks_of(4, "new"))

    assert [row[3].split()[0] for row in stored(session, org, doc)] == ["new"] * 4
    assert [row[3].split()[0] for row in stored(session, org, sibling)] == ["sibling"] * 2
    assert [row[3].split()[0] for row in stored(session, other_org, other)] == ["theirs"] * 2


def test_another_organizations_document_is_refused_and_nothing_is_written(
    any_session: Session,
) -> None:
    session, org, other_org = any_session, new_org(), new_org()
    base, doc = new_document(session, org)

    # When other_org writes chunks under org's document id, the foreign key refuses them
    with pytest.raises(IntegrityError), session.begin_nested():
        replace(session, other_org, base, doc, chunks_of(2))

    assert stored(session, other_org, doc) == [] and stored(session, org, doc) == []


def test_a_naive_creation_time_is_refused_before_anything_is_sent(any_session: Session) -> None:
    session, org = any_session, new_org()
    base, doc = new_document(session, org)

    with pytest.raises(ValueError, match="timezone-aware"):
        replace(session, org, base, doc, chunks_of(1), created_at=datetime(2026, 1, 1))


def test_a_copied_chunk_set_is_noted_for_the_vector_cache(pg_session: Session) -> None:
    # Given the change log that tells retrieval's vector cache a tenant's chunks changed
    session, org = pg_session, new_org()
    base, doc = new_document(session, org)

    replace(session, org, base, doc, chunks_of(3))

    # Then the COPY fired kb_chunks' insert trigger: this transaction changed org's chunks
    noted = session.scalars(
        text(
            "SELECT organization_id FROM api2.kb_chunk_changes "
            "WHERE txid = pg_current_xact_id()::text::bigint"
        )
    ).all()
    assert noted == [org]
