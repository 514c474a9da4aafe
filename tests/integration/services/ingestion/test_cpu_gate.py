"""A pass with an in-process embedder parses, splits and embeds under its process's CPU gate,
and nowhere else; with a provider's embedder, or over a large text, it takes no gate (real
PostgreSQL).

The gate only orders a process's threads: every document still ends ready with its whole
chunk set, one version and one usage event, and a pass that fails lets go of the gate.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from sqlalchemy import Engine, delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from services.indexing.chunking import Chunker
from services.indexing.cpu_gate import GATED_MAX_SIZE, cpu_gate_for
from services.indexing.embedders import HashingEmbedder
from services.indexing.extract import extract
from services.ingestion import ingestion_job, pipeline, store
from shared.db.engine import make_session_factory
from shared.db.models import KbChunk, KbDocument, KbDocumentVersion, KnowledgeBase, UsageEvent
from shared.errors import Retryable
from tests.integration.services.ingestion.factories import new_org, new_text_document

NOW = datetime(2026, 12, 1, tzinfo=UTC)
CHUNKER = Chunker(max_tokens=40, overlap_tokens=5)
#: The process's gate, as a lock (to ask whether it is held).
GATE = cast(threading.Lock, cpu_gate_for(HashingEmbedder(), 1))


class _GateWitness(HashingEmbedder):
    """The hashing embedder, noting whether the process's gate is held while it embeds;
    ``cpu_bound`` as given, optionally failing."""

    def __init__(self, *, cpu_bound: bool = True, fail: Exception | None = None) -> None:
        super().__init__(384)
        self.cpu_bound = cpu_bound
        self.fail = fail
        self.held: list[bool] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.held.append(GATE.locked())
        if self.fail is not None:
            raise self.fail
        return super().embed(texts)


def words(tag: str, count: int = 160) -> str:
    return " ".join(f"{tag}w{i}" for i in range(count))


@pytest.fixture
def committed(engine: Engine) -> Iterator[tuple[sessionmaker[Session], int]]:
    """A committing session factory and a fresh organization; its rows go afterwards."""
    factory, org = make_session_factory(engine), new_org()
    yield factory, org
    with factory() as session:
        for model in (UsageEvent, KbChunk, KbDocumentVersion, KbDocument, KnowledgeBase):
            session.execute(delete(model).where(model.organization_id == org))
        session.commit()


def _add(factory: sessionmaker[Session], org: int, texts: dict[str, str]) -> dict[str, int]:
    with factory() as session:
        ids = {name: new_text_document(session, org, name, text) for name, text in texts.items()}
        session.commit()
    return ids


def _run(
    factory: sessionmaker[Session], org: int, doc_id: int, embedder: HashingEmbedder
) -> pipeline.IngestOutcome:
    return ingestion_job.run_ingestion(
        factory,
        organization_id=org,
        document_id=doc_id,
        chunker=CHUNKER,
        embedder=embedder,
        final_attempt=False,
        now=NOW,
    )


def test_an_in_process_embedder_embeds_under_the_gate_and_the_pass_lets_go_of_it(
    committed: tuple[sessionmaker[Session], int],
) -> None:
    factory, org = committed
    ids = _add(factory, org, {"notes": words("a")})

    embedder = _GateWitness()
    outcome = _run(factory, org, ids["notes"], embedder)

    assert outcome.status == "ready" and outcome.chunk_count > 1
    assert embedder.held == [True] and not GATE.locked()


def test_a_provider_embedder_embeds_without_the_gate(
    committed: tuple[sessionmaker[Session], int],
) -> None:
    factory, org = committed
    ids = _add(factory, org, {"notes": words("b")})

    embedder = _GateWitness(cpu_bound=False)
    outcome = _run(factory, org, ids["notes"], embedder)

    assert outcome.status == "ready" and embedder.held == [False]


def test_a_text_over_the_gated_size_is_embedded_without_the_gate(
    committed: tuple[sessionmaker[Session], int],
) -> None:
    factory, org = committed
    large = words("e", GATED_MAX_SIZE // 6)
    ids = _add(factory, org, {"large": large})
    assert len(_extracted(large)) > GATED_MAX_SIZE

    embedder = _GateWitness()
    outcome = _run(factory, org, ids["large"], embedder)

    assert outcome.status == "ready" and embedder.held and not any(embedder.held)


def test_a_pass_failing_under_the_gate_lets_go_of_it_and_its_attempt_counts(
    committed: tuple[sessionmaker[Session], int],
) -> None:
    factory, org = committed
    ids = _add(factory, org, {"notes": words("c")})

    with pytest.raises(Retryable):
        _run(factory, org, ids["notes"], _GateWitness(fail=Retryable("embeddings: 503")))

    assert not GATE.locked()
    with factory() as session:
        document = store.get_document(session, organization_id=org, document_id=ids["notes"])
        assert (document.status, document.attempts) == ("processing", 1)
    # The next attempt, on any thread, gets the gate.
    assert _run(factory, org, ids["notes"], _GateWitness()).status == "ready"


def test_passes_on_four_threads_under_the_gate_each_write_their_whole_chunk_set(
    committed: tuple[sessionmaker[Session], int],
) -> None:
    factory, org = committed
    texts = {f"doc{i}": words(f"d{i}", 120 + 40 * i) for i in range(8)}
    ids = _add(factory, org, texts)
    embedder = _GateWitness()

    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(lambda doc_id: _run(factory, org, doc_id, embedder), ids.values()))

    assert [o.status for o in outcomes] == ["ready"] * 8
    assert all(embedder.held) and len(embedder.held) == 8 and not GATE.locked()
    with factory() as session:
        for name, doc_id in ids.items():
            chunks = store.list_chunks(session, organization_id=org, document_id=doc_id)
            expected = CHUNKER.split(_extracted(texts[name]))
            assert [(c.position, c.content) for c in chunks] == [
                (e.position, e.content) for e in expected
            ]
        counts: list[Any] = [
            session.scalar(select(func.count()).where(model.organization_id == org))
            for model in (KbDocumentVersion, UsageEvent)
        ]
    assert counts == [8, 8]


def _extracted(raw: str) -> str:
    return extract(raw.encode(), content_type="text/plain", filename=None).text
