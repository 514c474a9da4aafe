"""Embedding a chunk set in bounded batches, packed: order, batch sizes, checks."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from services.indexing import chunk_batches
from services.indexing.chunking import Chunk
from services.indexing.embedders import HashingEmbedder
from shared.errors import Unrecoverable


class Recording:
    """An embedder that records the size of every call and returns a vector naming the
    text's position, so order can be checked."""

    name = "recording"

    def __init__(self, dimensions: int = 3, batch_size: int | None = None) -> None:
        self.dimensions = dimensions
        self.calls: list[int] = []
        if batch_size is not None:
            self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(len(texts))
        return [[float(text.split()[1])] * self.dimensions for text in texts]


def chunks(n: int) -> list[Chunk]:
    return [Chunk(position=i, content=f"chunk {i}", token_count=2) for i in range(n)]


def test_vectors_come_back_packed_in_chunk_order_over_several_calls() -> None:
    embedder = Recording()

    vectors = chunk_batches.embed_chunks(embedder, chunks(600))

    assert embedder.calls == [256, 256, 88]
    assert [vector[0] for vector in vectors] == [float(i) for i in range(600)]
    assert all(vector.typecode == "d" and len(vector) == 3 for vector in vectors)


def test_packing_keeps_the_embedders_values_exactly() -> None:
    embedder = HashingEmbedder(dimensions=32)
    texts = chunks(5)

    packed = chunk_batches.embed_chunks(embedder, texts)

    assert [list(vector) for vector in packed] == embedder.embed([c.content for c in texts])


@pytest.mark.parametrize(("own", "expected"), [(None, 256), (64, 256), (100, 300), (1000, 1000)])
def test_a_call_is_a_whole_number_of_the_embedders_own_batches(
    own: int | None, expected: int
) -> None:
    assert chunk_batches.embed_batch_size(Recording(batch_size=own)) == expected


def test_a_wrong_number_of_vectors_is_unrecoverable() -> None:
    class Short(Recording):
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            return super().embed(texts)[:-1]

    with pytest.raises(Unrecoverable, match="returned 9 vectors for 10 chunks"):
        chunk_batches.embed_chunks(Short(), chunks(10))


def test_a_vector_of_another_length_is_unrecoverable() -> None:
    class Wide(Recording):
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            return [[*vector, 0.0] for vector in super().embed(texts)]

    with pytest.raises(Unrecoverable, match="4-dimensional vector, declared 3"):
        chunk_batches.embed_chunks(Wide(), chunks(2))


def test_no_chunks_embed_nothing() -> None:
    embedder = Recording()

    assert chunk_batches.embed_chunks(embedder, []) == []
    assert embedder.calls == []
