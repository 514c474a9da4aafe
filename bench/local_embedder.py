"""The local all-MiniLM-L6-v2 embedder: its raw rate and the
embedding-bound ingestion rate.

  python -m bench.local_embedder            # 100 documents
  python -m bench.local_embedder --documents 20

Needs the ``local-embeddings`` extra (``pip install torch==2.13.0`` first, then
``pip install -e '.[local-embeddings]'``). No Redis: everything runs in this process.

1. **Raw**: the chunks of the corpus (the production ``Chunker``, 400-token chunks) through
   ``LocalModelEmbedder.embed`` alone, after a warm-up, in the configured batch size:
   chunks/s of the model on this machine's cores.
2. **Ingestion**: the same documents stored in ``processing`` in the embedded PostgreSQL 18
   with pgvector (a temporary directory, migrated), then ``pipeline.ingest_document`` for
   each, one after another, each in its own transaction (extract, split, embed, write the
   chunk set and its version, mark ready): chunks/s end to end, and its ratio to the raw
   rate (1.0 would mean the model is the only cost).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import markdown_table, rnd, write_result

NAME = "local_embedder"
#: The issue's raw rate of the local model on these machines (chunks/s).
ISSUE_RAW_RATE = 22.0
_VOCABULARY = (
    "account billing invoice refund password reset login security policy customer support "
    "ticket order shipping delivery tracking return warranty product feature release update "
    "install configure server database backup restore network firewall access permission role "
    "team project report revenue quarter growth forecast budget contract renewal subscription "
    "plan upgrade downgrade trial discount payment card bank transfer tax receipt email phone "
    "chat agent escalation priority incident outage status latency error timeout retry"
)
_WORDS = _VOCABULARY.split()


def corpus(documents: int, seed: int = 7) -> list[tuple[str, bytes]]:
    """``documents`` plain-text documents of 2 to 12 kB of sentences, deterministic."""
    rng = random.Random(seed)
    result = []
    for number in range(documents):
        target = rng.randint(2_000, 12_000)
        sentences: list[str] = []
        size = 0
        while size < target:
            words = rng.choices(_WORDS, k=rng.randint(6, 18))
            sentence = " ".join(words).capitalize() + "."
            sentences.append(sentence)
            size += len(sentence) + 1
            if rng.random() < 0.15:
                sentences.append("\n\n")
        result.append((f"doc-{number:04d}.txt", " ".join(sentences).encode()))
    return result


def measure_raw(embedder: Any, texts: list[str]) -> dict[str, Any]:
    embedder.embed(texts[: embedder.batch_size])  # load the model, warm up
    started = time.perf_counter()
    vectors = embedder.embed(texts)
    seconds = time.perf_counter() - started
    assert len(vectors) == len(texts)
    return {
        "chunks": len(texts),
        "seconds": rnd(seconds, 2),
        "chunks_per_second": rnd(len(texts) / seconds, 1),
    }


def measure_ingestion(
    embedder: Any, documents: list[tuple[str, bytes]], say: Any
) -> dict[str, Any]:
    from services.app.embedded import start_embedded_postgres
    from services.indexing.chunking import Chunker
    from services.ingestion import pipeline, store
    from shared.db.base import utcnow
    from shared.db.engine import make_engine, make_session_factory, session_scope
    from shared.db.migrate import upgrade

    with tempfile.TemporaryDirectory(prefix="bench-local-embedder-") as directory:
        service = start_embedded_postgres(
            Path(directory) / "postgres", port=0, database="bench_local_embedder"
        )
        engine = None
        try:
            upgrade(service.url)
            engine = make_engine(service.url)
            sessions = make_session_factory(engine)
            organization = 501
            with session_scope(sessions) as session:
                base = store.create_knowledge_base(
                    session, organization_id=organization, name="bench-local"
                ).id
                ids = [
                    store.add_document(
                        session,
                        organization_id=organization,
                        knowledge_base_id=base,
                        name=name,
                        source=store.FileSource(data, "text/plain", name),
                    ).document.id
                    for name, data in documents
                ]
                session.commit()
            chunker = Chunker()
            embed_seconds = 0.0
            original = embedder.embed

            def timed_embed(texts: Any) -> Any:
                nonlocal embed_seconds
                started = time.perf_counter()
                try:
                    return original(texts)
                finally:
                    embed_seconds += time.perf_counter() - started

            embedder.embed = timed_embed
            chunks = 0
            started = time.perf_counter()
            try:
                for document_id in ids:
                    with session_scope(sessions) as session:
                        result = pipeline.ingest_document(
                            session,
                            organization_id=organization,
                            document_id=document_id,
                            chunker=chunker,
                            embedder=embedder,
                            now=utcnow(),
                        )
                        session.commit()
                    if result.status != "ready":
                        raise RuntimeError(f"document {document_id}: {result}")
                    chunks += result.chunk_count
            finally:
                embedder.embed = original
            wall = time.perf_counter() - started
            say(f"ingestion: {len(ids)} documents, {chunks} chunks in {wall:.1f} s")
            return {
                "documents": len(ids),
                "chunks": chunks,
                "wall_seconds": rnd(wall, 2),
                "documents_per_second": rnd(len(ids) / wall, 2),
                "chunks_per_second": rnd(chunks / wall, 1),
                "embed_seconds": rnd(embed_seconds, 2),
                "embed_share": rnd(embed_seconds / wall, 3),
            }
        finally:
            if engine is not None:
                engine.dispose()
            service.stop()


def run(documents: int, batch_size: int, say: Any) -> dict[str, Any]:
    import torch  # type: ignore[import-not-found]  # the local embedder's extra

    from services.indexing.chunking import Chunker
    from services.indexing.embedders import LocalModelEmbedder
    from services.indexing.extract import extract

    load_before = list(os.getloadavg())
    embedder = LocalModelEmbedder(batch_size=batch_size)
    docs = corpus(documents)
    chunker = Chunker()
    texts = [
        chunk.content
        for name, data in docs
        for chunk in chunker.split(extract(data, content_type="text/plain", filename=name).text)
    ]
    say(f"raw: {len(texts)} chunks of {documents} documents, batch {batch_size}")
    raw = measure_raw(embedder, texts)
    say(f"raw: {raw['chunks_per_second']} chunks/s")
    ingestion = measure_ingestion(embedder, docs, say)
    ingestion["ratio_to_raw"] = rnd(ingestion["chunks_per_second"] / raw["chunks_per_second"], 3)
    return {
        "name": NAME,
        "machine": {
            "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            # Other processes' load while this ran (the machine may be shared).
            "loadavg_before": load_before,
            "loadavg_after": list(os.getloadavg()),
        },
        "settings": {"documents": documents, "batch_size": batch_size, "chunk_tokens": 400},
        "issue_raw_chunks_per_second": ISSUE_RAW_RATE,
        "raw": raw,
        "ingestion": ingestion,
    }


def summary(result: dict[str, Any]) -> str:
    raw, ingestion = result["raw"], result["ingestion"]
    rows = [
        ["model alone (raw)", raw["chunks"], raw["seconds"], raw["chunks_per_second"], "1.00"],
        [
            "ingestion, embedding-bound (extract, split, embed, write)",
            ingestion["chunks"],
            ingestion["wall_seconds"],
            ingestion["chunks_per_second"],
            f"{ingestion['ratio_to_raw']:.2f}",
        ],
    ]
    table = markdown_table(["local all-MiniLM-L6-v2", "chunks", "s", "chunks/s", "x raw"], rows)
    return (
        f"{table}\n\n{result['machine']['cores']} cores, {result['machine']['torch_threads']} "
        f"torch threads; the issue's raw figure: ~{result['issue_raw_chunks_per_second']:.0f} "
        f"chunks/s; embedding is {ingestion['embed_share']:.0%} of the ingestion time."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.local_embedder", description=__doc__)
    parser.add_argument("--documents", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    options = parser.parse_args(argv)

    def say(message: str) -> None:
        print(f"[{NAME}] {message}", file=sys.stderr, flush=True)

    result = run(options.documents, options.batch_size, say)
    path = write_result(NAME, result)
    print(summary(result))
    say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
