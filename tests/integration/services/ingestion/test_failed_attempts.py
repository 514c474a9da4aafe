"""Which submission a failed ingestion attempt counts against (real PostgreSQL).

The job reads the document's submission in the pass's own transaction (its first
statement), not in one of its own before it: an attempt that fails after that read counts
against the submission it read, and is not counted against a re-submission that arrived
meanwhile; one that fails before it reads anything counts against the current one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from sqlalchemy import Engine, delete
from sqlalchemy.orm import Session, sessionmaker

from services.indexing.chunking import Chunker
from services.indexing.embedders import HashingEmbedder
from services.ingestion import ingestion_job, pipeline, store
from shared.db.base import utcnow
from shared.db.engine import make_session_factory
from shared.db.models import KbChunk, KbDocument, KbDocumentVersion, KnowledgeBase, UsageEvent
from shared.errors import Retryable
from tests.integration.services.ingestion.factories import new_org


@pytest.fixture
def committed(engine: Engine) -> Iterator[tuple[sessionmaker[Session], int]]:
    """A committing session factory and a fresh organization with a knowledge base; the
    organization's rows go afterwards."""
    factory, org = make_session_factory(engine), new_org()
    with factory() as session:
        store.create_knowledge_base(session, organization_id=org, name="Docs")
        session.commit()
    yield factory, org
    with factory() as session:
        for model in (UsageEvent, KbChunk, KbDocumentVersion, KbDocument, KnowledgeBase):
            session.execute(delete(model).where(model.organization_id == org))
        session.commit()


def submit(factory: sessionmaker[Session], org: int, text: str) -> int:
    """Add (or re-submit, by its name) the document "notes"; its id."""
    with factory() as session:
        (base,) = store.list_knowledge_bases(session, organization_id=org)
        added = store.add_document(
            session,
            organization_id=org,
            knowledge_base_id=base.id,
            name="notes",
            source=store.TextSource(text),
        )
        session.commit()
        return added.document.id


def state(factory: sessionmaker[Session], org: int, doc_id: int) -> tuple[str, int]:
    with factory() as session:
        document = store.get_document(session, organization_id=org, document_id=doc_id)
        return document.status, document.attempts


def attempt(
    factory: sessionmaker[Session], org: int, doc_id: int, embedder: HashingEmbedder
) -> pipeline.IngestOutcome:
    return ingestion_job.run_ingestion(
        factory,
        organization_id=org,
        document_id=doc_id,
        chunker=Chunker(),
        embedder=embedder,
        final_attempt=True,
        now=utcnow(),
    )


class _ResubmitThenFail(HashingEmbedder):
    """Re-submits the document (a re-upload, committed by another session) while the pass
    embeds, then fails as a provider outage would."""

    def __init__(self, resubmit: Any) -> None:
        super().__init__(384)
        self.resubmit = resubmit

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.resubmit()
        raise Retryable("embeddings: 503 Service Unavailable")


def test_a_failed_final_attempt_is_not_counted_against_a_re_submission(
    committed: tuple[sessionmaker[Session], int],
) -> None:
    factory, org = committed
    doc_id = submit(factory, org, "first draft of the notes " * 40)

    # The last attempt fails after a re-upload arrived: the new submission is not failed
    embedder = _ResubmitThenFail(lambda: submit(factory, org, "second draft " * 40))
    with pytest.raises(Retryable):
        attempt(factory, org, doc_id, embedder)
    assert state(factory, org, doc_id) == ("processing", 0)

    # and its own pass makes it ready
    assert attempt(factory, org, doc_id, HashingEmbedder(384)).status == "ready"


def test_a_failed_final_attempt_fails_the_submission_it_read(
    committed: tuple[sessionmaker[Session], int],
) -> None:
    factory, org = committed
    doc_id = submit(factory, org, "notes that will not embed " * 40)

    embedder = _ResubmitThenFail(lambda: None)
    with pytest.raises(Retryable):
        attempt(factory, org, doc_id, embedder)
    assert state(factory, org, doc_id) == ("failed", 1)


def test_an_attempt_failing_before_its_first_read_counts_against_the_current_submission(
    committed: tuple[sessionmaker[Session], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    factory, org = committed
    doc_id = submit(factory, org, "notes read after an outage " * 40)
    read = store.read_document

    def lost_connection(*args: Any, **kwargs: Any) -> store.DocumentRead:
        monkeypatch.setattr(store, "read_document", read)
        raise Retryable("database: connection lost")

    # The job's first read fails (the failure path reads the document on its own)
    monkeypatch.setattr(store, "read_document", lost_connection)
    with pytest.raises(Retryable):
        attempt(factory, org, doc_id, HashingEmbedder(384))
    assert state(factory, org, doc_id) == ("failed", 1)
