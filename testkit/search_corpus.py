"""The synthetic retrieval corpus, shared by the search tests
(``tests/integration/services/ingestion/test_search.py``) and the retrieval benchmark
(``python -m bench.search``).

Short chunk texts drawn from per-organization topics over a Zipfian vocabulary, embedded with
the hashing embedder and loaded with ``COPY`` into ``api2.kb_chunks`` (a base and ready
documents of ten chunks each per organization); the exact top k of an organization (every
distance computed, no index), recall against it, and the naive tenant-filtered plan
(``WHERE organization_id = :org ORDER BY embedding <=> :q LIMIT k`` on pgvector's defaults).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.orm import Session

from services.indexing.embedders import HashingEmbedder
from shared.db.vector import vector_literal

HNSW_INDEX = "ix_kb_chunks_embedding_hnsw"
HNSW_INDEX_SQL = (
    f"CREATE INDEX {HNSW_INDEX} ON api2.kb_chunks USING hnsw (embedding vector_cosine_ops)"
)
CHUNKS_PER_DOCUMENT = 10


# -- the synthetic corpus ---------------------------------------------------------------------


class TextMaker:
    """Short chunk texts: words from one of the organization's topics (~35%) and from a
    shared Zipfian vocabulary, so chunks of one topic are near each other and queries have
    both close and distant neighbours, as in real knowledge bases."""

    def __init__(
        self, seed: int, vocabulary: int = 20_000, length: tuple[int, int] = (40, 80)
    ) -> None:
        self.rng = random.Random(seed)
        self.length = length
        syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
        words: set[str] = set()
        while len(words) < vocabulary:
            words.add("".join(self.rng.choices(syllables, k=self.rng.randint(2, 4))))
        self.words = sorted(words)
        self.rng.shuffle(self.words)
        self.weights = [1.0 / (rank + 1) ** 1.1 for rank in range(vocabulary)]
        self.cumulative = _cumulative(self.weights)

    def topics(self, count: int, size: int = 40) -> list[list[str]]:
        middle = self.words[200:]
        return [self.rng.sample(middle, size) for _ in range(count)]

    def chunk(self, topic: Sequence[str]) -> str:
        length = self.rng.randint(*self.length)
        general = self.rng.choices(self.words, cum_weights=self.cumulative, k=length)
        return " ".join(
            self.rng.choice(topic) if self.rng.random() < 0.35 else word for word in general
        )

    def query(self, chunk: str) -> str:
        words = chunk.split()
        size = self.rng.randint(5, 9)
        start = self.rng.randrange(0, max(1, len(words) - size))
        return " ".join(words[start : start + size])


def _cumulative(weights: Sequence[float]) -> list[float]:
    total, out = 0.0, []
    for weight in weights:
        total += weight
        out.append(total)
    return out


def organization_sizes(
    total: int, organizations: int, fixed: dict[int, int], first_id: int
) -> dict[int, int]:
    """``organization_id -> chunks``: ``fixed`` sizes (ids relative to ``first_id``) and the
    rest of ``total`` spread evenly over the other organizations."""
    others = [first_id + i for i in range(organizations) if i not in fixed]
    rest = total - sum(fixed.values())
    sizes = {first_id + i: n for i, n in fixed.items()}
    for index, organization_id in enumerate(others):
        sizes[organization_id] = rest // len(others) + (1 if index < rest % len(others) else 0)
    return sizes


def _vector_text(vector: Sequence[float]) -> str:
    # pgvector stores float4: 7 significant digits lose nothing.
    return "[" + ",".join(f"{value:.7g}" for value in vector) + "]"


def load_corpus(
    session: Session,
    sizes: dict[int, int],
    maker: TextMaker,
    *,
    embedder: HashingEmbedder | None = None,
    topics_per_organization: int = 8,
) -> dict[int, list[str]]:
    """Insert each organization's chunks (one base, ready documents of 10 chunks) with
    COPY in the session's transaction; returns each organization's chunk texts."""
    embedder = embedder or HashingEmbedder()
    texts: dict[int, list[str]] = {}
    connection = session.connection().connection.driver_connection
    assert connection is not None
    for organization_id, count in sizes.items():
        topics = maker.topics(topics_per_organization)
        texts[organization_id] = [maker.chunk(maker.rng.choice(topics)) for _ in range(count)]
        base_id = session.execute(
            text(
                "INSERT INTO api2.knowledge_bases (organization_id, name) "
                "VALUES (:org, 'bench') RETURNING id"
            ),
            {"org": organization_id},
        ).scalar_one()
        documents = session.execute(
            text(
                "INSERT INTO api2.kb_documents (organization_id, knowledge_base_id, name, kind, "
                "status, current_version) SELECT :org, :base, 'doc-' || n, 'text', 'ready', 1 "
                "FROM generate_series(1, :n) n RETURNING id"
            ),
            {"org": organization_id, "base": base_id, "n": -(-count // CHUNKS_PER_DOCUMENT)},
        ).scalars()
        document_ids = sorted(documents)
        with connection.cursor().copy(
            "COPY api2.kb_chunks (organization_id, knowledge_base_id, document_id, position, "
            "content, token_count, embedding) FROM STDIN"
        ) as copy:
            for offset in range(0, count, 1_000):
                batch = texts[organization_id][offset : offset + 1_000]
                for index, (content, vector) in enumerate(
                    zip(batch, embedder.embed(batch), strict=True), start=offset
                ):
                    document_id = document_ids[index // CHUNKS_PER_DOCUMENT]
                    copy.write_row(
                        (
                            organization_id,
                            base_id,
                            document_id,
                            index % CHUNKS_PER_DOCUMENT,
                            content,
                            len(content.split()),
                            _vector_text(vector),
                        )
                    )
    return texts


# -- exact truth and recall -------------------------------------------------------------------


def exact_neighbours(
    session: Session, organization_id: int, vector: Sequence[float], k: int
) -> list[tuple[int, float]]:
    """The organization's ``k`` nearest ready chunks, from every distance (no index)."""
    rows = session.execute(
        text(
            "SELECT c.id, c.embedding <=> CAST(:v AS vector) FROM api2.kb_chunks c "
            "JOIN api2.kb_documents d ON d.organization_id = c.organization_id "
            "AND d.id = c.document_id WHERE c.organization_id = :org AND d.status = 'ready' "
            "AND d.deleted_at IS NULL AND c.audience = '{}'"
        ),
        {"v": vector_literal(vector), "org": organization_id},
    ).all()
    ranked = sorted(((int(i), float(d)) for i, d in rows if d == d), key=lambda r: (r[1], r[0]))
    return ranked[:k]


def recall(found: Sequence[tuple[int, float]], truth: Sequence[tuple[int, float]]) -> float:
    """Recall of ``found`` against the exact ``truth`` (same k); a found chunk whose
    distance ties the last true distance counts (ties are ordered arbitrarily)."""
    if not truth:
        return 1.0
    ids, last = {chunk_id for chunk_id, _ in truth}, truth[-1][1]
    hits = sum(1 for chunk_id, d in found[: len(truth)] if chunk_id in ids or d <= last + 1e-6)
    return min(hits, len(truth)) / len(truth)


def naive_nearest(
    session: Session, organization_id: int, vector: Sequence[float], k: int
) -> list[tuple[int, float]]:
    """A tenant-filtered top-k the way pgvector plans it when the index looks cheaper: walk
    the HNSW index with its defaults (ef_search 40, no iterative scan) and filter the rows
    it returns. Sorting is disabled (in a savepoint) so this plan is the one measured even
    where the planner would sort a small organization's rows instead."""
    savepoint = session.begin_nested()
    try:
        session.execute(
            text(
                "SELECT set_config('enable_sort', 'off', true), "
                "set_config('hnsw.ef_search', '40', true), "
                "set_config('hnsw.iterative_scan', 'off', true)"
            )
        )
        rows = session.execute(
            text(
                "SELECT id, embedding <=> CAST(:v AS vector) AS d FROM api2.kb_chunks "
                "WHERE organization_id = :org ORDER BY embedding <=> CAST(:v AS vector) "
                "LIMIT :k"
            ),
            {"v": vector_literal(vector), "org": organization_id, "k": k},
        ).all()
    finally:
        savepoint.rollback()
    return [(int(i), float(d)) for i, d in rows]
