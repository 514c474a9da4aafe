"""The offline token-aware chunker."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise

import pytest

from services.indexing.chunking import Chunk, Chunker

PARAGRAPH = (
    "Refunds are issued to the original payment method within five business days. "
    "Customers who paid by bank transfer receive the refund by cheque instead. "
)
MARKDOWN = (
    "# Billing\n\n"
    + PARAGRAPH * 12
    + "\n\n## Shipping\n\n"
    + "Orders ship from the warehouse in Rotterdam every weekday morning. " * 15
    + "\n\n## Returns\n\n- Keep the receipt.\n- Use the original box.\n- Print the label.\n"
)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any attempt to open a socket fails the test: the chunker must work offline."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the chunker tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    yield


def test_chunks_stay_within_the_token_budget_and_cover_the_text(no_network: None) -> None:
    chunker = Chunker(max_tokens=60, overlap_tokens=10)

    chunks = chunker.split(MARKDOWN)

    assert len(chunks) > 3
    assert [chunk.position for chunk in chunks] == list(range(len(chunks)))
    assert all(0 < chunk.token_count <= 60 for chunk in chunks)
    assert all(chunk.content == chunk.content.strip() for chunk in chunks)
    for word in ("Billing", "Rotterdam", "receipt", "label"):
        assert any(word in chunk.content for chunk in chunks)


def test_token_counts_are_exact_for_known_texts(no_network: None) -> None:
    chunker = Chunker()

    # cl100k_base: "hello world" is two tokens, " world" repeated adds one each.
    assert chunker.count_tokens("hello world") == 2
    assert chunker.count_tokens("hello world world world") == 4
    assert chunker.count_tokens("") == 0


def test_neighbouring_chunks_overlap() -> None:
    text = " ".join(f"Sentence number {i} talks about topic {i}." for i in range(80))
    chunker = Chunker(max_tokens=50, overlap_tokens=20, markdown=False)

    chunks = chunker.split(text)

    assert len(chunks) > 2
    for previous, current in pairwise(chunks):
        first_sentence = current.content.split(".")[0]
        assert first_sentence in previous.content


def test_no_overlap_means_no_repeated_text() -> None:
    text = " ".join(f"Sentence number {i} talks about topic {i}." for i in range(80))

    chunks = Chunker(max_tokens=50, overlap_tokens=0, markdown=False).split(text)

    assert " ".join(chunk.content for chunk in chunks) == text


def test_markdown_headings_open_chunks_instead_of_closing_them() -> None:
    markdown = Chunker(max_tokens=200, overlap_tokens=0).split(MARKDOWN)
    plain = Chunker(max_tokens=200, overlap_tokens=0, markdown=False).split(MARKDOWN)

    assert any(chunk.content.startswith("## Shipping") for chunk in markdown)
    assert not any(chunk.content.endswith("## Shipping") for chunk in markdown)
    assert any(chunk.content.endswith("## Shipping") for chunk in plain)


def test_splitting_is_deterministic() -> None:
    first = Chunker(max_tokens=80, overlap_tokens=15).split(MARKDOWN)
    second = Chunker(max_tokens=80, overlap_tokens=15).split(MARKDOWN)

    assert first == second
    assert all(isinstance(chunk, Chunk) for chunk in first)


def test_the_splitter_is_built_at_the_first_split() -> None:
    # Bootstrap builds every product's chunker, also in processes that never split (a
    # maintenance worker, the scheduler, the API): building the splitter loads the encoding.
    chunker = Chunker(max_tokens=80, overlap_tokens=15)
    assert chunker._built is None

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: chunker.split(MARKDOWN), range(8)))

    assert chunker._built is not None
    expected = Chunker(max_tokens=80, overlap_tokens=15).split(MARKDOWN)
    assert all(result == expected for result in results)


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t"])
def test_blank_text_has_no_chunks(text: str) -> None:
    assert Chunker().split(text) == []


def test_short_text_is_one_chunk() -> None:
    chunks = Chunker().split("  Just one line.  ")

    assert chunks == [Chunk(position=0, content="Just one line.", token_count=4)]


@pytest.mark.parametrize(("max_tokens", "overlap"), [(0, 0), (10, 10), (10, -1), (10, 20)])
def test_invalid_sizes_are_refused(max_tokens: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        Chunker(max_tokens=max_tokens, overlap_tokens=overlap)


def test_fingerprint_names_everything_that_shapes_the_chunks() -> None:
    assert Chunker(400, 50).fingerprint == "markdown:text-embedding-3-small:400/50"
    assert Chunker(400, 50).fingerprint != Chunker(300, 50).fingerprint
    assert Chunker(400, 50).fingerprint != Chunker(400, 50, markdown=False).fingerprint


def test_non_latin_text_is_counted_in_tokens_not_characters() -> None:
    text = "退款将在五个工作日内退回原支付方式。" * 40

    chunks = Chunker(max_tokens=50, overlap_tokens=0).split(text)

    assert len(chunks) > 1
    assert all(chunk.token_count <= 50 for chunk in chunks)
    assert "".join(chunk.content for chunk in chunks) == text
