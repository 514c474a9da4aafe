"""A pass reads its document once and writes only while that submission is still current
(real PostgreSQL).

The pass reads the document's state and source in one statement at its start
(``store.read_document``); under the document's lock, the statement that writes the indexed
state (``store.mark_indexed``) is also the check that the document is live, in
``processing`` and on the submission the pass read: when it is not, nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, delete, event, func, select
from sqlalchemy.orm import Session, sessionmaker

from services.indexing.chunking import Chunker
from services.indexing.embedders import HashingEmbedder
from services.ingestion import ingestion_job, pipeline, store
from services.ingestion.store import documents
from shared.db.engine import make_session_factory
from shared.db.models import KbChunk, KbDocument, KbDocumentVersion, KnowledgeBase, UsageEvent
from shared.errors import RecordMissing
from tests.integration.services.ingestion.factories import new_org

NOW = datetime(2026, 12, 1, tzinfo=UTC)
CHUNKER = Chunker(max_tokens=40, overlap_tokens=5)


def words(tag: str, count: int = 120) -> str:
    return " ".join(f"{tag}{i}" for i in range(count))


def add(session: Session, org: int, name: str, source: store.DocumentSource, **kw: Any) -> int:
    (base,) = store.list_knowledge_bases(session, organization_id=org) or [
        store.create_knowledge_base(session, organization_id=org, name="Docs")
    ]
    added = store.add_document(
        session, organization_id=org, knowledge_base_id=base.id, name=name, source=source, **kw
    )
    return added.document.id


def written_rows(session: Session, org: int, doc_id: int) -> tuple[int, int, int]:
    """The document's chunks, versions and usage events."""
    return tuple(  # type: ignore[return-value]
        session.scalar(select(func.count()).where(model.organization_id == org, where)) or 0
        for model, where in (
            (KbChunk, KbChunk.document_id == doc_id),
            (KbDocumentVersion, KbDocumentVersion.document_id == doc_id),
            (UsageEvent, UsageEvent.subject_id == doc_id),
        )
    )


# -- the read ------------------------------------------------------------------------------


def test_the_read_gives_the_state_and_the_whole_source_slice_by_slice(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    org = new_org()
    monkeypatch.setattr(documents, "SOURCE_READ_SLICE", 1000)
    data = bytes(range(256)) * 39 + b"tail"  # 9,988 bytes: 10 slices, the last one short
    doc_id = add(
        session, org, "bin", store.FileSource(data, "text/plain", "b.txt"), audience=["staff"]
    )
    stored = store.get_document(session, organization_id=org, document_id=doc_id)
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    engine = session.get_bind().engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        read = store.read_document(session, organization_id=org, document_id=doc_id)
    finally:
        event.remove(engine, "before_cursor_execute", record)

    state = read.document
    assert (state.id, state.organization_id, state.knowledge_base_id) == (
        doc_id,
        org,
        stored.knowledge_base_id,
    )
    assert (state.kind, state.status, state.content_type, state.filename) == (
        "file",
        "processing",
        "text/plain",
        "b.txt",
    )
    assert state.audience == ["staff"] and state.submitted_at == stored.submitted_at
    assert (state.current_version, state.content_hash, state.submission_cause) == (
        0,
        None,
        "upload",
    )
    # The first slice comes with the state; the nine others are read one statement each
    assert len(statements) == 9
    assert read.take_source() == data and read.take_source() is None


def test_the_read_of_another_tenants_or_a_deleted_document_is_missing(session: Session) -> None:
    org = new_org()
    doc_id = add(session, org, "doc", store.TextSource("some text"))
    assert store.read_document(session, organization_id=org, document_id=doc_id).take_source()

    with pytest.raises(RecordMissing):
        store.read_document(session, organization_id=org + 1, document_id=doc_id)
    store.delete_document(session, organization_id=org, document_id=doc_id)
    with pytest.raises(RecordMissing):
        store.read_document(session, organization_id=org, document_id=doc_id)


# -- the guarded write ---------------------------------------------------------------------


def _mark(session: Session, state: store.DocumentState) -> bool:
    version = state.current_version + 1
    return store.mark_indexed(
        session,
        state,
        version=version,
        content_hash="b" * 64,
        index_fingerprint="fingerprint",
        new_version=store.NewVersion(version, "new text", "b" * 64, state.submission_cause),
        payload={"chunks": 0, "tokens": 0, "embedded": 0},
        now=NOW,
    )


def _resubmitted(session: Session, document: KbDocument) -> None:
    store.resubmit(document, document.submitted_at + timedelta(seconds=1))


def _settled(session: Session, document: KbDocument) -> None:
    pipeline.mark_failed(document, "failed by a concurrent run", NOW)


def _deleted(session: Session, document: KbDocument) -> None:
    document.deleted_at = NOW


@pytest.mark.parametrize(
    "change", [_resubmitted, _settled, _deleted], ids=["re-submitted", "settled", "deleted"]
)
def test_a_document_changed_since_the_read_is_not_written(
    session: Session, change: Callable[[Session, KbDocument], None]
) -> None:
    # Given a ready document (version 1, its chunks, one event) put back in processing
    org = new_org()
    doc_id = add(session, org, "doc", store.TextSource(words("v1")))
    pipeline.ingest_document(
        session,
        organization_id=org,
        document_id=doc_id,
        chunker=CHUNKER,
        embedder=HashingEmbedder(),
        now=NOW,
    )
    store.mark_for_retry(session, organization_id=org, document_id=doc_id)
    before = written_rows(session, org, doc_id)
    assert before[0] > 0 and before[1:] == (1, 1)
    state = store.read_document(session, organization_id=org, document_id=doc_id).document

    # When it changes after the pass read it, and the pass writes
    document = store.get_document(session, organization_id=org, document_id=doc_id)
    change(session, document)
    session.flush()
    row_before = session.execute(
        select(KbDocument.status, KbDocument.attempts, KbDocument.current_version).where(
            KbDocument.id == doc_id
        )
    ).one()
    written = _mark(session, state)

    # Then nothing is written: its chunks, versions, events and row stay as they were
    assert written is False
    assert written_rows(session, org, doc_id) == before
    row_after = session.execute(
        select(KbDocument.status, KbDocument.attempts, KbDocument.current_version).where(
            KbDocument.id == doc_id
        )
    ).one()
    assert row_after == row_before


def test_a_document_unchanged_since_the_read_is_written(session: Session) -> None:
    org = new_org()
    doc_id = add(session, org, "doc", store.TextSource(words("v1")))
    state = store.read_document(session, organization_id=org, document_id=doc_id).document

    assert _mark(session, state) is True

    document = store.get_document(session, organization_id=org, document_id=doc_id)
    assert (document.status, document.current_version, document.attempts) == ("ready", 1, 1)
    assert written_rows(session, org, doc_id) == (0, 1, 1)


# -- the pass ------------------------------------------------------------------------------


@pytest.fixture
def committed(engine: Engine) -> Iterator[tuple[sessionmaker[Session], int]]:
    """A committing session factory and a fresh organization; its rows go afterwards."""
    factory, org = make_session_factory(engine), new_org()
    yield factory, org
    with factory() as session:
        for model in (UsageEvent, KbChunk, KbDocumentVersion, KbDocument, KnowledgeBase):
            session.execute(delete(model).where(model.organization_id == org))
        session.commit()


class _MeanwhileEmbedder(HashingEmbedder):
    """Runs ``meanwhile`` (another session's committed change) during its first call."""

    def __init__(self, meanwhile: Callable[[], None]) -> None:
        super().__init__(384)
        self.meanwhile: Callable[[], None] | None = meanwhile
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        if self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            meanwhile()
        return super().embed(texts)


def _run(factory: sessionmaker[Session], org: int, doc_id: int, embedder: HashingEmbedder) -> Any:
    return ingestion_job.run_ingestion(
        factory,
        organization_id=org,
        document_id=doc_id,
        chunker=CHUNKER,
        embedder=embedder,
        final_attempt=False,
        now=NOW,
    )


def test_a_pass_whose_document_is_re_uploaded_meanwhile_writes_nothing_and_starts_over(
    committed: tuple[sessionmaker[Session], int],
) -> None:
    factory, org = committed
    with factory() as session:
        doc_id = add(session, org, "notes", store.TextSource(words("first")))
        session.commit()

    def re_upload() -> None:
        with factory() as session:
            add(session, org, "notes", store.TextSource(words("second")))
            session.commit()

    # When the document is re-uploaded while the pass embeds its first text
    embedder = _MeanwhileEmbedder(re_upload)
    outcome = _run(factory, org, doc_id, embedder)

    # Then the first pass wrote nothing, and the job's next pass indexed the second text
    assert embedder.calls == 2 and outcome.status == "ready" and not outcome.superseded
    with factory() as session:
        contents = [
            c.content for c in store.list_chunks(session, organization_id=org, document_id=doc_id)
        ]
        versions = store.list_versions(session, organization_id=org, document_id=doc_id)
        assert written_rows(session, org, doc_id) == (len(contents), 1, 1)
    assert contents and all(c.startswith("second") for c in contents)
    assert [v.version for v in versions] == [1] and outcome.version == 1


def test_a_pass_whose_document_is_deleted_meanwhile_writes_nothing(
    committed: tuple[sessionmaker[Session], int],
) -> None:
    factory, org = committed
    with factory() as session:
        doc_id = add(session, org, "notes", store.TextSource(words("first")))
        session.commit()

    def delete_it() -> None:
        with factory() as session:
            store.delete_document(session, organization_id=org, document_id=doc_id)
            session.commit()

    with pytest.raises(RecordMissing):
        _run(factory, org, doc_id, _MeanwhileEmbedder(delete_it))
    with factory() as session:
        assert written_rows(session, org, doc_id) == (0, 0, 0)
