"""The zero-configuration hashing embedder, and picking an embedder from settings."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from services.indexing.embedders import (
    Embedder,
    HashingEmbedder,
    OpenAICompatibleEmbedder,
    embedder_from_settings,
)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_vectors_have_the_dimensions_and_unit_length() -> None:
    embedder = HashingEmbedder(dimensions=64)

    vectors = embedder.embed(["Refunds take five days.", "Shipping is free."])

    assert [len(vector) for vector in vectors] == [64, 64]
    for vector in vectors:
        assert math.isclose(math.sqrt(sum(v * v for v in vector)), 1.0)


def test_similar_texts_score_higher_than_unrelated_ones() -> None:
    embedder = HashingEmbedder()
    query, similar, unrelated = embedder.embed(
        [
            "How long does a refund to my credit card take?",
            "A refund to the original credit card takes five business days.",
            "Our warehouse in Rotterdam ships orders every weekday morning.",
        ]
    )

    assert cosine(query, similar) > cosine(query, unrelated)
    assert cosine(query, similar) > 0.2


def test_identical_texts_have_identical_vectors_and_case_does_not_matter() -> None:
    embedder = HashingEmbedder()

    first, second, shouted = embedder.embed(
        ["Reset your password", "Reset your password", "RESET YOUR PASSWORD"]
    )

    assert first == second == shouted
    assert math.isclose(cosine(first, shouted), 1.0)


def test_word_order_matters_through_bigrams() -> None:
    embedder = HashingEmbedder()

    a, b = embedder.embed(["dog bites man", "man bites dog"])

    assert cosine(a, b) < 0.999


def test_vectors_are_the_same_in_every_process() -> None:
    # Pinned values: BLAKE2b, unlike Python's hash(), is not salted per process.
    vector = HashingEmbedder(dimensions=8).embed(["hello world"])[0]

    third = 1 / math.sqrt(3)  # "hello", "world", "hello world", one slot each
    assert vector == pytest.approx([0.0, 0.0, third, 0.0, -third, 0.0, -third, 0.0])


def test_text_without_words_is_the_zero_vector() -> None:
    assert HashingEmbedder(dimensions=4).embed(["  ... !!! "]) == [[0.0, 0.0, 0.0, 0.0]]


def test_no_texts_no_vectors() -> None:
    assert HashingEmbedder().embed([]) == []


def test_it_is_an_embedder_named_for_its_space() -> None:
    embedder = HashingEmbedder(dimensions=128)

    assert isinstance(embedder, Embedder)
    assert embedder.dimensions == 128
    assert embedder.name == "hashing-blake2b-v1"


def test_dimensions_must_be_positive() -> None:
    with pytest.raises(ValueError):
        HashingEmbedder(dimensions=0)


def test_settings_default_to_the_hashing_embedder() -> None:
    embedder = embedder_from_settings(SimpleNamespace())

    assert isinstance(embedder, HashingEmbedder)
    assert embedder.dimensions == 384


def test_settings_pick_the_openai_embedder() -> None:
    settings = SimpleNamespace(
        embedder="openai",
        embedding_api_url="http://127.0.0.1:9/v1",
        embedding_api_key="sk-x",
        embedding_model="text-embedding-3-large",
        embedding_dimensions=1024,
    )

    embedder = embedder_from_settings(settings)

    assert isinstance(embedder, OpenAICompatibleEmbedder)
    assert (embedder.model, embedder.dimensions, embedder.batch_size) == (
        "text-embedding-3-large",
        1024,
        64,
    )
    assert embedder.client.base_url == "http://127.0.0.1:9/v1"
    assert embedder.window is None


def test_settings_with_an_unknown_embedder_are_refused() -> None:
    with pytest.raises(ValueError, match="embedder"):
        embedder_from_settings(SimpleNamespace(embedder="word2vec"))
