"""The chunker's exact token counter agrees with the splitter's own measure (bisection).

The splits themselves come from the splitter unchanged; what changed is how a chunk's
``token_count`` is measured. Every count is compared with the old way of measuring it: the
smallest capacity at which the splitter keeps the text whole.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from services.indexing.chunking import Chunk, Chunker
from services.indexing.token_counter import counter_for_model


@pytest.fixture(scope="module")
def chunker() -> Chunker:
    return Chunker()


def test_the_fast_counter_is_used_for_the_default_model() -> None:
    assert counter_for_model("text-embedding-3-small") is not None
    # Another encoding (o200k_base) is not bundled as cl100k is: bisection stays its counter.
    assert counter_for_model("gpt-4o") is None


ROOT = Path(__file__).resolve().parents[4]


def corpus() -> list[Path]:
    """This repository's prose and code: markdown, Python, Lua and YAML of every size."""
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    paths += sorted((ROOT / "services" / "indexing").glob("*.py"))
    paths += sorted((ROOT / "tiers" / "lua").glob("*.lua"))[:3]
    return [path for path in paths if path.is_file()]


def test_splits_of_a_corpus_are_the_ones_bisection_measured(chunker: Chunker) -> None:
    documents = corpus()
    assert len(documents) > 10
    for document in documents:
        text = document.read_text(encoding="utf-8")
        chunks = chunker.split(text)
        pieces = [piece for piece in chunker._splitter.chunks(text) if piece.strip()]
        expected = [
            Chunk(position, piece, chunker.count_tokens_by_bisection(piece))
            for position, piece in enumerate(pieces)
        ]
        assert chunks == expected, document.name


def test_other_models_split_exactly_as_before() -> None:
    chunker = Chunker(max_tokens=40, overlap_tokens=5, tokenizer_model="gpt-4o")
    text = "Orders ship from the warehouse in Rotterdam every weekday morning. " * 20
    chunks = chunker.split(text)
    assert len(chunks) > 2
    assert all(0 < chunk.token_count <= 40 for chunk in chunks)


PIECES = [
    *"abcXYZ019 \n\t.,'!?-_#*`<>|",
    "é", "ß", "中文", "🙂", "'s", "'ll", "<|endoftext|>", "\r\n", "   ", "123456"
]  # fmt: skip
TEXTS = st.lists(st.sampled_from(PIECES), max_size=120).map("".join) | st.text(max_size=200)


def agrees_with_bisection(chunker: Chunker, text: str, count: int) -> bool:
    """``count`` is bisection's answer, or the text is one grapheme the splitter cannot cut,
    which bisection measured as 1 token whatever its size (the one place the old count was
    wrong: the splitter keeps an uncuttable piece whole even when it exceeds the capacity)."""
    by_bisection = chunker.count_tokens_by_bisection(text)
    if count == by_bisection:
        return True
    return by_bisection == 1 and chunker._fits(text, 1) and count > 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXTS)
def test_counts_equal_bisection_on_any_text(chunker: Chunker, text: str) -> None:
    # What is counted is a chunk, and chunks come from the splitter trimmed: blank text is never
    # counted, nor whitespace at either end. There the two measures may differ ("\n   \n" is one
    # cl100k token, which bisection reads as two; "a\r\n\t\r\n" two, which it reads as three).
    text = text.strip()
    assume(text)
    assert agrees_with_bisection(chunker, text, chunker.count_tokens(text))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXTS, max_tokens=st.integers(min_value=2, max_value=60))
def test_every_chunk_fits_and_is_counted_as_bisection_counts(text: str, max_tokens: int) -> None:
    chunker = Chunker(max_tokens=max_tokens, overlap_tokens=max_tokens // 4)
    for chunk in chunker.split(text):
        assert agrees_with_bisection(chunker, chunk.content, chunk.token_count)
        assert chunk.token_count <= max_tokens or chunker._fits(chunk.content, 1)
