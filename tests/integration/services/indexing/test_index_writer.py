"""Idempotent, tenant-scoped replacement of a document's chunks and search row."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest
from sqlalchemy import delete, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from services.indexing.chunking import Chunker
from services.indexing.embedders import HashingEmbedder
from services.indexing.index_writer import (
    IndexOutcome,
    content_hash,
    remove_document_index,
    replace_document_index,
)
from shared.db.models import DocumentChunk, Organization, PgSearchDocument
from shared.errors import Retryable, Unrecoverable

SOURCE_TYPE = "KnowledgeBaseDocument"
TITLE = "Refund policy"
CONTENT = (
    "# Refunds\n\n"
    + "Refunds go back to the original payment method within five business days. " * 20
    + "\n\n## Exceptions\n\n"
    + "Gift cards are never refunded in cash; the balance stays on the card. " * 20
)
NEW_CONTENT = "# Refunds\n\nRefunds now take ten business days. " * 30


class CountingEmbedder:
    """A hashing embedder that counts its calls and texts, optionally slowly."""

    def __init__(self, dimensions: int = 16, delay: float = 0.0) -> None:
        self.inner = HashingEmbedder(dimensions)
        self.delay = delay
        self.calls = 0
        self.texts = 0
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        with self._lock:
            self.calls += 1
            self.texts += len(texts)
        time.sleep(self.delay)
        return self.inner.embed(texts)


@dataclass
class Tenants:
    a: int
    b: int


@pytest.fixture
def tenants(session: Session) -> Tenants:
    a, b = Organization(name="A"), Organization(name="B")
    session.add_all([a, b])
    session.flush()
    return Tenants(a.id, b.id)


@pytest.fixture
def chunker() -> Chunker:
    return Chunker(max_tokens=60, overlap_tokens=10)


def replace(
    session: Session,
    organization_id: int,
    content: str,
    *,
    chunker: Chunker,
    embedder: CountingEmbedder,
    source_id: int = 7,
    title: str = TITLE,
    searchable_type: str | None = None,
) -> IndexOutcome:
    return replace_document_index(
        session,
        organization_id=organization_id,
        source_type=SOURCE_TYPE,
        source_id=source_id,
        title=title,
        content=content,
        chunker=chunker,
        embedder=embedder,
        searchable_type=searchable_type,
    )


def chunks_of(session: Session, organization_id: int, source_id: int = 7) -> list[DocumentChunk]:
    return list(
        session.scalars(
            select(DocumentChunk)
            .where(
                DocumentChunk.organization_id == organization_id,
                DocumentChunk.source_type == SOURCE_TYPE,
                DocumentChunk.source_id == source_id,
            )
            .order_by(DocumentChunk.position)
            .execution_options(populate_existing=True)
        )
    )


def search_rows_of(
    session: Session, organization_id: int, source_id: int = 7
) -> list[PgSearchDocument]:
    return list(
        session.scalars(
            select(PgSearchDocument)
            .where(
                PgSearchDocument.organization_id == organization_id,
                PgSearchDocument.searchable_id == source_id,
            )
            .execution_options(populate_existing=True)
        )
    )


def assert_one_chunk_set(session: Session, organization_id: int, outcome: IndexOutcome) -> None:
    chunks = chunks_of(session, organization_id)
    assert [chunk.position for chunk in chunks] == list(range(outcome.chunk_count))
    assert {chunk.content_hash for chunk in chunks} == {outcome.content_hash}


def test_a_document_is_chunked_embedded_and_searchable(
    session: Session, tenants: Tenants, chunker: Chunker
) -> None:
    embedder = CountingEmbedder()

    outcome = replace(session, tenants.a, CONTENT, chunker=chunker, embedder=embedder)

    expected = chunker.split(CONTENT)
    assert outcome == IndexOutcome(len(expected), False, content_hash(TITLE, CONTENT))
    assert len(expected) > 2
    chunks = chunks_of(session, tenants.a)
    assert [(c.position, c.content, c.token_count) for c in chunks] == [
        (c.position, c.content, c.token_count) for c in expected
    ]
    assert [c.embedding for c in chunks] == HashingEmbedder(16).embed([c.content for c in expected])
    assert embedder.calls == 1
    (row,) = search_rows_of(session, tenants.a)
    assert (row.searchable_type, row.content) == (SOURCE_TYPE, f"{TITLE}\n\n{CONTENT}")
    found = session.scalars(
        select(PgSearchDocument.searchable_id).where(
            PgSearchDocument.organization_id == tenants.a,
            PgSearchDocument.content_tsvector.op("@@")(
                func.plainto_tsquery("simple", "gift cards")
            ),
        )
    ).all()
    assert found == [7]


def test_replacing_twice_leaves_one_chunk_set(
    session: Session, tenants: Tenants, chunker: Chunker
) -> None:
    replace(session, tenants.a, NEW_CONTENT, chunker=chunker, embedder=CountingEmbedder())

    outcome = replace(session, tenants.a, CONTENT, chunker=chunker, embedder=CountingEmbedder())

    assert_one_chunk_set(session, tenants.a, outcome)
    assert len(search_rows_of(session, tenants.a)) == 1


def test_unchanged_content_embeds_nothing(
    session: Session, tenants: Tenants, chunker: Chunker
) -> None:
    first = replace(session, tenants.a, CONTENT, chunker=chunker, embedder=CountingEmbedder())
    ids_before = [chunk.id for chunk in chunks_of(session, tenants.a)]
    embedder = CountingEmbedder()

    again = replace(session, tenants.a, CONTENT, chunker=chunker, embedder=embedder)

    assert embedder.calls == 0
    assert again == IndexOutcome(first.chunk_count, True, first.content_hash)
    assert [chunk.id for chunk in chunks_of(session, tenants.a)] == ids_before


def test_changed_content_replaces_the_chunk_set(
    session: Session, tenants: Tenants, chunker: Chunker
) -> None:
    replace(session, tenants.a, CONTENT, chunker=chunker, embedder=CountingEmbedder())
    embedder = CountingEmbedder()

    outcome = replace(session, tenants.a, NEW_CONTENT, chunker=chunker, embedder=embedder)

    assert not outcome.unchanged
    assert embedder.texts == outcome.chunk_count
    assert_one_chunk_set(session, tenants.a, outcome)
    assert not any("Gift cards" in chunk.content for chunk in chunks_of(session, tenants.a))
    (row,) = search_rows_of(session, tenants.a)
    assert row.content == f"{TITLE}\n\n{NEW_CONTENT}"


def test_a_new_title_alone_rebuilds_the_index(
    session: Session, tenants: Tenants, chunker: Chunker
) -> None:
    replace(session, tenants.a, CONTENT, chunker=chunker, embedder=CountingEmbedder())

    outcome = replace(
        session, tenants.a, CONTENT, chunker=chunker, embedder=CountingEmbedder(), title="Refunds"
    )

    assert not outcome.unchanged
    assert (search_rows_of(session, tenants.a)[0].content or "").startswith("Refunds\n\n# Refunds")


def test_another_embedder_or_chunker_makes_the_chunk_set_stale(
    session: Session, tenants: Tenants, chunker: Chunker
) -> None:
    replace(session, tenants.a, CONTENT, chunker=chunker, embedder=CountingEmbedder(16))
    wider = CountingEmbedder(32)

    by_embedder = replace(session, tenants.a, CONTENT, chunker=chunker, embedder=wider)
    by_chunker = replace(
        session, tenants.a, CONTENT, chunker=Chunker(120, 0), embedder=CountingEmbedder(32)
    )

    assert (by_embedder.unchanged, wider.calls) == (False, 1)
    assert len(chunks_of(session, tenants.a)[0].embedding or []) == 32
    assert not by_chunker.unchanged
    assert_one_chunk_set(session, tenants.a, by_chunker)


def test_a_stale_search_row_is_repaired_without_embedding(
    session: Session, tenants: Tenants, chunker: Chunker
) -> None:
    replace(session, tenants.a, CONTENT, chunker=chunker, embedder=CountingEmbedder())
    session.execute(delete(PgSearchDocument).where(PgSearchDocument.organization_id == tenants.a))
    embedder = CountingEmbedder()

    outcome = replace(session, tenants.a, CONTENT, chunker=chunker, embedder=embedder)

    assert (outcome.unchanged, embedder.calls) == (True, 0)
    (row,) = search_rows_of(session, tenants.a)
    assert row.content == f"{TITLE}\n\n{CONTENT}"


def test_the_search_row_type_can_differ_from_the_chunk_source_type(
    session: Session, tenants: Tenants, chunker: Chunker
) -> None:
    replace(
        session,
        tenants.a,
        CONTENT,
        chunker=chunker,
        embedder=CountingEmbedder(),
        searchable_type="KnowledgeBaseArticle",
    )

    (row,) = search_rows_of(session, tenants.a)
    assert row.searchable_type == "KnowledgeBaseArticle"
    assert {chunk.source_type for chunk in chunks_of(session, tenants.a)} == {SOURCE_TYPE}


@pytest.mark.parametrize("empty", ["", "  \n\t "])
def test_empty_content_removes_the_chunks_and_the_search_row(
    session: Session, tenants: Tenants, chunker: Chunker, empty: str
) -> None:
    replace(session, tenants.a, CONTENT, chunker=chunker, embedder=CountingEmbedder())
    embedder = CountingEmbedder()

    outcome = replace(session, tenants.a, empty, chunker=chunker, embedder=embedder)
    again = replace(session, tenants.a, empty, chunker=chunker, embedder=embedder)

    assert (outcome.chunk_count, outcome.unchanged) == (0, False)
    assert (again.chunk_count, again.unchanged) == (0, True)
    assert embedder.calls == 0
    assert chunks_of(session, tenants.a) == []
    assert search_rows_of(session, tenants.a) == []


def test_remove_document_index_deletes_only_that_document(
    session: Session, tenants: Tenants, chunker: Chunker
) -> None:
    first = replace(session, tenants.a, CONTENT, chunker=chunker, embedder=CountingEmbedder())
    other = replace(
        session, tenants.a, NEW_CONTENT, chunker=chunker, embedder=CountingEmbedder(), source_id=8
    )

    removed = remove_document_index(
        session, organization_id=tenants.a, source_type=SOURCE_TYPE, source_id=7
    )

    assert removed == first.chunk_count + 1
    assert chunks_of(session, tenants.a) == []
    assert search_rows_of(session, tenants.a) == []
    assert len(chunks_of(session, tenants.a, source_id=8)) == other.chunk_count
    assert len(search_rows_of(session, tenants.a, source_id=8)) == 1


def test_another_organization_never_touches_the_chunks_of_the_same_source_id(
    session: Session, tenants: Tenants, chunker: Chunker
) -> None:
    mine = replace(session, tenants.a, CONTENT, chunker=chunker, embedder=CountingEmbedder())
    before = [(c.id, c.content, c.content_hash) for c in chunks_of(session, tenants.a)]

    with pytest.raises(Unrecoverable, match="another organization"):
        replace(session, tenants.b, NEW_CONTENT, chunker=chunker, embedder=CountingEmbedder())
    removed = remove_document_index(
        session, organization_id=tenants.b, source_type=SOURCE_TYPE, source_id=7
    )
    empty = replace(session, tenants.b, "", chunker=chunker, embedder=CountingEmbedder())

    assert removed == 0
    assert (empty.chunk_count, empty.unchanged) == (0, True)
    assert [(c.id, c.content, c.content_hash) for c in chunks_of(session, tenants.a)] == before
    assert len(search_rows_of(session, tenants.a)) == 1
    assert chunks_of(session, tenants.b) == [] and search_rows_of(session, tenants.b) == []
    embedder = CountingEmbedder()
    assert replace(session, tenants.a, CONTENT, chunker=chunker, embedder=embedder) == (
        IndexOutcome(mine.chunk_count, True, mine.content_hash)
    )
    assert embedder.calls == 0


def test_the_unchanged_check_is_tenant_scoped(
    session: Session, tenants: Tenants, chunker: Chunker
) -> None:
    replace(session, tenants.a, CONTENT, chunker=chunker, embedder=CountingEmbedder())
    embedder = CountingEmbedder()

    # Organization B's document 8 has the same text as A's document 7: it is still indexed.
    outcome = replace(session, tenants.b, CONTENT, chunker=chunker, embedder=embedder, source_id=8)

    assert (outcome.unchanged, embedder.calls) == (False, 1)
    assert len(chunks_of(session, tenants.b, source_id=8)) == outcome.chunk_count


# Committed work across sessions and threads: each test uses its own organization.


@pytest.fixture
def committed_organization(db_session_factory: sessionmaker[Session]) -> Iterator[int]:
    with db_session_factory() as setup:
        organization = Organization(name="committed")
        setup.add(organization)
        setup.commit()
        organization_id = organization.id
    yield organization_id
    with db_session_factory() as cleanup:
        cleanup.execute(
            delete(DocumentChunk).where(DocumentChunk.organization_id == organization_id)
        )
        cleanup.execute(
            delete(PgSearchDocument).where(PgSearchDocument.organization_id == organization_id)
        )
        cleanup.execute(delete(Organization).where(Organization.id == organization_id))
        cleanup.commit()


def test_readers_see_the_old_index_until_the_caller_commits(
    db_session_factory: sessionmaker[Session], committed_organization: int, chunker: Chunker
) -> None:
    with db_session_factory() as writer:
        old = replace(
            writer, committed_organization, CONTENT, chunker=chunker, embedder=CountingEmbedder()
        )
        writer.commit()
    with db_session_factory() as writer, db_session_factory() as reader:
        new = replace(
            writer,
            committed_organization,
            NEW_CONTENT,
            chunker=chunker,
            embedder=CountingEmbedder(),
        )
        writer.flush()

        seen_before = {c.content_hash for c in chunks_of(reader, committed_organization)}
        reader.rollback()
        writer.commit()
        seen_after = {c.content_hash for c in chunks_of(reader, committed_organization)}

    assert seen_before == {old.content_hash}
    assert seen_after == {new.content_hash}


def test_a_second_replacement_embeds_first_then_waits_for_the_lock(
    db_session_factory: sessionmaker[Session], committed_organization: int, chunker: Chunker
) -> None:
    # Given a replacement that holds the document's lock (not committed yet)
    first = db_session_factory()
    replace(first, committed_organization, CONTENT, chunker=chunker, embedder=CountingEmbedder())
    second_embedder = CountingEmbedder()
    outcomes: list[IndexOutcome] = []

    def second_replacement() -> None:
        with db_session_factory() as second:
            outcomes.append(
                replace(
                    second,
                    committed_organization,
                    NEW_CONTENT,
                    chunker=chunker,
                    embedder=second_embedder,
                )
            )
            second.commit()

    # When a second replacement of the same document starts
    thread = threading.Thread(target=second_replacement)
    thread.start()
    thread.join(timeout=0.5)
    blocked = thread.is_alive()
    embedded_while_blocked = second_embedder.calls
    first.commit()
    first.close()
    thread.join(timeout=10)

    # Then it embedded without the lock, waited for the first to commit, and replaced it
    assert blocked, "the second replacement did not wait for the document's lock"
    assert embedded_while_blocked == 1
    with db_session_factory() as check:
        assert_one_chunk_set(check, committed_organization, outcomes[0])
        assert outcomes[0].content_hash == content_hash(TITLE, NEW_CONTENT)
        assert len(search_rows_of(check, committed_organization)) == 1


def test_a_search_row_repair_that_loses_a_race_retries_instead_of_embedding_under_the_lock(
    db_session_factory: sessionmaker[Session], committed_organization: int, chunker: Chunker
) -> None:
    # Given an index of CONTENT whose search row went missing
    with db_session_factory() as setup:
        replace(
            setup, committed_organization, CONTENT, chunker=chunker, embedder=CountingEmbedder()
        )
        setup.execute(
            delete(PgSearchDocument).where(
                PgSearchDocument.organization_id == committed_organization
            )
        )
        setup.commit()
    # and a replacement with NEW_CONTENT holding the lock
    first = db_session_factory()
    replace(
        first, committed_organization, NEW_CONTENT, chunker=chunker, embedder=CountingEmbedder()
    )
    repair_embedder = CountingEmbedder()
    errors: list[BaseException] = []

    def repair() -> None:
        with db_session_factory() as own:
            try:
                replace(
                    own, committed_organization, CONTENT, chunker=chunker, embedder=repair_embedder
                )
            except BaseException as exc:
                errors.append(exc)

    # When the repair (chunks current before the lock) gets the lock after NEW_CONTENT commits
    thread = threading.Thread(target=repair)
    thread.start()
    thread.join(timeout=0.5)
    first.commit()
    first.close()
    thread.join(timeout=10)

    # Then it asks for a retry rather than embedding while holding the lock
    assert [type(error) for error in errors] == [Retryable]
    assert repair_embedder.calls == 0
    with db_session_factory() as check:
        hashes = {c.content_hash for c in chunks_of(check, committed_organization)}
        assert hashes == {content_hash(TITLE, NEW_CONTENT)}


@pytest.mark.parametrize("same_content", [True, False])
def test_three_concurrent_replacements_leave_exactly_one_chunk_set(
    db_session_factory: sessionmaker[Session],
    committed_organization: int,
    chunker: Chunker,
    same_content: bool,
) -> None:
    contents = [CONTENT] * 3 if same_content else [CONTENT, NEW_CONTENT, CONTENT + " Addendum."]
    start = threading.Barrier(3)
    outcomes: dict[int, IndexOutcome] = {}
    errors: list[BaseException] = []

    def run(worker: int) -> None:
        try:
            with db_session_factory() as own:
                start.wait(timeout=10)
                outcomes[worker] = replace(
                    own,
                    committed_organization,
                    contents[worker],
                    chunker=chunker,
                    embedder=CountingEmbedder(delay=0.2),
                )
                own.commit()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(worker,)) for worker in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert errors == []
    with db_session_factory() as check:
        chunks = chunks_of(check, committed_organization)
        hashes = {chunk.content_hash for chunk in chunks}
        assert len(hashes) == 1
        (winner,) = [o for o in outcomes.values() if o.content_hash in hashes][:1]
        assert [chunk.position for chunk in chunks] == list(range(winner.chunk_count))
        (row,) = search_rows_of(check, committed_organization)
        assert content_hash(TITLE, (row.content or "").removeprefix(f"{TITLE}\n\n")) in hashes
        total = check.scalar(
            text("SELECT count(*) FROM document_chunks WHERE organization_id = :o"),
            {"o": committed_organization},
        )
        assert total == winner.chunk_count
