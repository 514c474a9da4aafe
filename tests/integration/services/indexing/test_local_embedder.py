"""The local all-MiniLM-L6-v2 embedder (``SPEEDTIER_EMBEDDER=local``).

The tests that run the model need the optional ``local-embeddings`` extra, which CI does not
install (it needs torch): they skip there, through ``pytest.importorskip``. To run them:
``pip install torch==2.13.0 && pip install -e '.[test,local-embeddings]'`` (torch first, or
pip pulls a CUDA build of several GB). The tests of a missing extra and of the settings run
everywhere.
"""

from __future__ import annotations

import math
import sys
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from services.indexing import embedders
from services.indexing.embedders import (
    LOCAL_EXTRA_MISSING,
    LOCAL_MODEL_PACKAGE,
    Embedder,
    LocalModelEmbedder,
    embedder_from_settings,
)
from shared.errors import Unrecoverable


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


# -- everywhere (CI included) ------------------------------------------------------------------


def test_local_without_the_extra_is_a_clear_unrecoverable(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes the package unfindable and unimportable, installed or not.
    monkeypatch.setitem(sys.modules, LOCAL_MODEL_PACKAGE, None)
    with pytest.raises(Unrecoverable) as caught:
        embedder_from_settings(SimpleNamespace(embedder="local"))
    assert str(caught.value) == LOCAL_EXTRA_MISSING
    assert "pip install torch==2.13.0 && pip install -e '.[local-embeddings]'" in str(caught.value)


def test_local_rejects_other_dimensions() -> None:
    with pytest.raises(ValueError, match="384"):
        embedder_from_settings(SimpleNamespace(embedder="local", embedding_dimensions=1536))


def test_settings_accept_local() -> None:
    from shared.config import InvalidSettings, load_settings

    assert load_settings(embedder="local").embedder == "local"
    with pytest.raises(InvalidSettings, match="SPEEDTIER_EMBEDDER"):
        load_settings(embedder="sentence-transformers")


# -- with the local-embeddings extra -----------------------------------------------------------


@pytest.fixture(scope="module")
def local() -> LocalModelEmbedder:
    pytest.importorskip(LOCAL_MODEL_PACKAGE, reason="the local-embeddings extra is not installed")
    pytest.importorskip("sentence_transformers", reason="the local-embeddings extra is missing")
    embedder = embedder_from_settings(SimpleNamespace(embedder="local", embedding_batch_size=8))
    assert isinstance(embedder, LocalModelEmbedder)
    return embedder


def test_semantic_similarity(local: LocalModelEmbedder) -> None:
    query, near, far = local.embed(
        [
            "How do I reset my password?",
            "Steps to change your account password",
            "Quarterly revenue grew 12%",
        ]
    )
    assert _cosine(query, near) > _cosine(query, far) + 0.3


def test_dimensions_and_normalised(local: LocalModelEmbedder) -> None:
    assert isinstance(local, Embedder)
    assert local.dimensions == 384
    assert local.name == "local:all-MiniLM-L6-v2"
    vectors = local.embed(["a short text", "another, somewhat longer text about invoices"])
    assert [len(v) for v in vectors] == [384, 384]
    assert all(isinstance(x, float) for x in vectors[0])
    for vector in vectors:
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, abs_tol=1e-4)
    assert local.embed([]) == []


def test_batch_order_preserved(local: LocalModelEmbedder) -> None:
    # 20 texts in batches of 8 (three forward passes, the last one short), lengths varied so
    # a length-sorting encoder must put them back in input order.
    texts = [f"document {i}: " + "about billing and refunds " * (i % 7 + 1) for i in range(20)]
    together = local.embed(texts)
    one_by_one = [local.embed([text])[0] for text in texts]
    assert len(together) == 20
    for batched, single in zip(together, one_by_one, strict=True):
        assert _cosine(batched, single) > 0.999


def test_model_loads_once_under_concurrent_first_use(local: LocalModelEmbedder) -> None:
    embedders._local_models.clear()
    results: list[Any] = [None] * 4
    start = threading.Barrier(4)

    def run(slot: int) -> None:
        start.wait()
        results[slot] = LocalModelEmbedder(batch_size=4).embed(["the same sentence"])[0]

    threads = [threading.Thread(target=run, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(embedders._local_models) == 1
    assert all(_cosine(results[0], other) > 0.9999 for other in results[1:])
