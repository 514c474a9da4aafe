"""The ingestion store against real PostgreSQL: re-uploads and deletes, input checks, API
keys, tenant isolation, and the chunk storage on the float8[] fallback and on pgvector."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.indexing.embedders import HashingEmbedder
from services.ingestion import search, store
from services.ingestion.rollback import request_rollback
from shared.db import migrate
from shared.db.base import API2_SCHEMA, Api2Base
from shared.db.models import (
    IngestionApiKey,
    KbChunk,
)
from shared.db.vector import compare_type, embedding_storage, has_pgvector, include_object
from shared.errors import RecordMissing
from tests.integration.services.ingestion.factories import new_org
from tests.integration.services.ingestion.pipeline_support import (
    CHUNKER,
    CountingEmbedder,
    add,
    chunk_rows,
    document,
    ingest,
    make_base,
    utc_now,
    words,
)

# -- the store -----------------------------------------------------------------------------


def test_a_re_upload_replaces_in_place_and_a_delete_frees_the_name(session: Session) -> None:
    org = new_org()
    base = make_base(session, org)
    first = add(session, org, base, "guide", store.TextSource(words("g1")))
    ingest(session, org, first)

    replaced = store.add_document(
        session,
        organization_id=org,
        knowledge_base_id=base.id,
        name="guide",
        source=store.FileSource(b"new bytes", "text/plain", "guide.txt"),
    )
    assert replaced.replaced and replaced.document.id == first.id
    assert (replaced.document.status, replaced.document.kind) == ("processing", "file")
    assert chunk_rows(session, org, first.id) != []  # the old chunk set serves meanwhile

    store.delete_document(session, organization_id=org, document_id=first.id)
    assert chunk_rows(session, org, first.id) == []
    with pytest.raises(RecordMissing):
        ingest(session, org, first)
    fresh = add(session, org, base, "guide", store.TextSource("again"))
    assert fresh.id != first.id
    listed = store.list_documents(session, organization_id=org, knowledge_base_id=base.id)
    assert [d.id for d in listed] == [fresh.id]

    store.delete_knowledge_base(session, organization_id=org, knowledge_base_id=base.id)
    with pytest.raises(RecordMissing):
        store.get_document(session, organization_id=org, document_id=fresh.id)
    assert store.list_knowledge_bases(session, organization_id=org) == []


def test_a_re_upload_keeps_its_current_version_searchable_under_the_new_audience(
    any_session: Session,
) -> None:
    session, org = any_session, new_org()
    base = make_base(session, org)
    doc = add(session, org, base, "notes", store.TextSource("Walrus migration notes."))
    ingest(session, org, doc)

    def visible(audience: Sequence[str] = ()) -> list[str]:
        """The chunk contents a search shows this audience (any query ranks them all)."""
        hits = search.search(
            session,
            organization_id=org,
            knowledge_base_id=base.id,
            query="notes",
            audience=audience,
            embedder=HashingEmbedder(),
        )
        return [session.get_one(KbChunk, hit.chunk_id).content for hit in hits]

    assert visible() == ["Walrus migration notes."]

    # When it is re-uploaded for staff only, while the new content is processed
    add(session, org, base, "notes", store.TextSource("Narwhal tusk notes."), audience=["staff"])
    # Then the old version still answers, for staff only
    assert visible() == []
    assert visible(["staff"]) == ["Walrus migration notes."]
    # and once ingested the new content replaces it
    ingest(session, org, doc)
    assert visible(["staff"]) == ["Narwhal tusk notes."]

    # When the next upload cannot be read, the document fails and keeps its last good version
    add(
        session,
        org,
        base,
        "notes",
        store.FileSource(b"%PDF-1.7 trunc", "application/pdf", "n"),
        audience=["staff"],
    )
    outcome = ingest(session, org, doc)
    assert outcome.status == "failed"
    assert visible(["staff"]) == ["Narwhal tusk notes."]


@pytest.mark.parametrize(
    ("name", "source", "problem"),
    [
        ("  ", store.TextSource("x"), "name"),
        ("u", store.UrlSource("ftp://example.com/"), "url"),
        ("u", store.UrlSource("https://example.com/", crawl_depth=9), "crawl_depth"),
    ],
)
def test_bad_document_input_is_refused(
    session: Session, name: str, source: store.DocumentSource, problem: str
) -> None:
    org = new_org()
    base = make_base(session, org)
    with pytest.raises(ValueError, match=problem):
        store.add_document(
            session, organization_id=org, knowledge_base_id=base.id, name=name, source=source
        )


def test_api_keys_are_stored_hashed_and_can_be_revoked(session: Session) -> None:
    org = new_org()
    key, plain = store.create_api_key(session, organization_id=org, name="ci")

    assert plain.startswith("stk_") and plain not in key.key_hash and len(key.key_hash) == 64
    assert store.organization_for_key(session, plain) == org
    assert store.organization_for_key(session, plain + "x") is None
    assert store.organization_for_key(session, "") is None
    with pytest.raises(RecordMissing):
        store.revoke_api_key(session, organization_id=new_org(), key_id=key.id)
    store.revoke_api_key(session, organization_id=org, key_id=key.id)
    session.flush()
    assert store.organization_for_key(session, plain) is None
    stored = session.scalars(select(IngestionApiKey.key_hash)).all()
    assert plain not in stored


# -- tenant isolation ----------------------------------------------------------------------


def test_another_organization_cannot_reach_a_document_by_id(session: Session) -> None:
    a, b = new_org(), new_org()
    base = make_base(session, a)
    doc = add(session, a, base, "secret", store.TextSource(words("secret")))
    ingest(session, a, doc)
    ids = {"organization_id": b, "document_id": doc.id}

    for call in (
        lambda: store.get_document(session, **ids),
        lambda: store.delete_document(session, **ids),
        lambda: store.mark_for_retry(session, **ids),
        lambda: store.list_versions(session, **ids),
        lambda: store.get_version(session, version=1, **ids),
        lambda: store.get_knowledge_base(session, organization_id=b, knowledge_base_id=base.id),
        lambda: store.list_documents(session, organization_id=b, knowledge_base_id=base.id),
        lambda: store.add_document(
            session,
            organization_id=b,
            knowledge_base_id=base.id,
            name="x",
            source=store.TextSource("x"),
        ),
        lambda: ingest(session, b, doc),
        lambda: request_rollback(
            session, version=1, chunker=CHUNKER, embedder=CountingEmbedder(), now=utc_now(), **ids
        ),
    ):
        with pytest.raises(RecordMissing):
            call()
    assert store.list_chunks(session, organization_id=b, document_id=doc.id) == []
    assert store.list_knowledge_bases(session, organization_id=b) == []
    assert document(session, a, doc.id).status == "ready"  # untouched

    # And the schema itself refuses a chunk pointing at another organization's document
    with pytest.raises(IntegrityError), session.begin_nested():
        session.add(
            KbChunk(
                organization_id=b,
                knowledge_base_id=base.id,
                document_id=doc.id,
                position=99,
                content="x",
                token_count=1,
                embedding=[0.0] * 384,
            )
        )
        session.flush()


# -- storage: float8[] fallback and pgvector -----------------------------------------------


def test_the_fallback_stores_float8_arrays_exactly(session: Session) -> None:
    org = new_org()
    doc = add(session, org, make_base(session, org), "f", store.TextSource(words("f")))
    ingest(session, org, doc)

    assert not has_pgvector(session)
    assert embedding_storage(session).kind == "float8[]"
    first = store.list_chunks(session, organization_id=org, document_id=doc.id)[0]
    assert first.embedding == HashingEmbedder().embed([first.content])[0]


def test_pgvector_stores_vectors_in_the_row_and_searches_them_through_hnsw(
    pg_session: Session,
) -> None:
    session, org = pg_session, new_org()
    doc = add(session, org, make_base(session, org), "v", store.TextSource(words("v", 400)))
    ingest(session, org, doc)

    assert has_pgvector(session) and embedding_storage(session).dims == 384
    storage = session.scalar(
        text(
            "SELECT attstorage FROM pg_attribute "
            "WHERE attrelid = 'api2.kb_chunks'::regclass AND attname = 'embedding'"
        )
    )
    assert storage == "p"  # PLAIN: in the row
    target = store.list_chunks(session, organization_id=org, document_id=doc.id)[3]
    query = "[" + ",".join(str(v) for v in HashingEmbedder().embed([target.content])[0]) + "]"
    session.execute(text("SET LOCAL enable_seqscan = off"))
    statement = "SELECT id FROM api2.kb_chunks ORDER BY embedding <=> CAST(:q AS vector) LIMIT 3"
    plan = "\n".join(session.scalars(text("EXPLAIN " + statement), {"q": query}))
    assert "ix_kb_chunks_embedding_hnsw" in plan
    assert session.scalars(text(statement), {"q": query}).first() == target.id
    assert target.embedding == pytest.approx(HashingEmbedder().embed([target.content])[0], abs=1e-6)


def test_models_match_the_migrations_on_pgvector(pgvector_database_url: str) -> None:
    engine = migrate.make_engine(pgvector_database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection,
                opts={
                    "include_schemas": True,
                    "include_name": lambda n, t, _p: n == API2_SCHEMA if t == "schema" else True,
                    "include_object": include_object,
                    "compare_type": compare_type,
                    "compare_server_default": True,
                    "version_table": migrate.VERSION_TABLE,
                    "version_table_schema": migrate.VERSION_TABLE_SCHEMA,
                },
            )
            assert compare_metadata(context, Api2Base.metadata) == []
    finally:
        engine.dispose()
