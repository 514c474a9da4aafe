"""Token-aware chunking that needs no network.

``semantic-text-splitter`` splits at the largest semantic unit that fits (markdown
headings, blocks, paragraphs, sentences, words) and measures chunks with tiktoken encodings
compiled into its wheel, so nothing is downloaded at run time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from services.indexing.token_counter import counter_for_model

if TYPE_CHECKING:  # imported with the first splitter built (2.3 MiB)
    from typing import TypeAlias

    from semantic_text_splitter import MarkdownSplitter, TextSplitter

    _Splitter: TypeAlias = MarkdownSplitter | TextSplitter

#: The tokenizer of OpenAI's embedding models (cl100k_base).
DEFAULT_TOKENIZER_MODEL = "text-embedding-3-small"


@dataclass(frozen=True)
class Chunk:
    """One piece of a document, in document order from ``position`` 0."""

    position: int
    content: str
    token_count: int


@lru_cache(maxsize=2048)
def _whole_splitter(model: str, capacity: int) -> _Splitter:
    # Whether a text fits one chunk depends only on its token count, not on the structure
    # the splitter would cut along, so the plain splitter answers it (4x faster than the
    # markdown one, measured on 2 kB of prose: 0.9 ms against 4.0 ms a run).
    from semantic_text_splitter import TextSplitter

    return TextSplitter.from_tiktoken_model(model, capacity, overlap=0, trim=False)


class Chunker:
    """Split text into chunks of at most ``max_tokens`` tokens, neighbours sharing up to
    ``overlap_tokens``.

    Parameters:
      max_tokens: the largest chunk, in tokens of ``tokenizer_model``'s encoding.
      overlap_tokens: how many tokens a chunk may repeat from the one before it.
      markdown: split on markdown structure (headings, lists, code blocks) first.
      tokenizer_model: an OpenAI model name whose tiktoken encoding measures tokens.

    Raises:
      ValueError: when the sizes are not ``0 <= overlap_tokens < max_tokens``.
    """

    def __init__(
        self,
        max_tokens: int = 400,
        overlap_tokens: int = 50,
        *,
        markdown: bool = True,
        tokenizer_model: str = DEFAULT_TOKENIZER_MODEL,
    ) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        if not 0 <= overlap_tokens < max_tokens:
            raise ValueError(
                f"overlap_tokens must be in [0, max_tokens), got {overlap_tokens} "
                f"with max_tokens {max_tokens}"
            )
        self.max_tokens = max_tokens
        self.overlap_tokens = overlap_tokens
        self.markdown = markdown
        self.tokenizer_model = tokenizer_model
        self._built: _Splitter | None = None
        self._building = threading.Lock()

    @property
    def _splitter(self) -> _Splitter:
        # Built at the first split, not here: building it loads the encoding's ranks (about
        # 23 MiB), which a process that never chunks (a maintenance worker, the scheduler,
        # the API) would otherwise carry because bootstrap builds every product's chunker.
        if self._built is None:
            with self._building:
                if self._built is None:
                    from semantic_text_splitter import MarkdownSplitter, TextSplitter

                    kind = MarkdownSplitter if self.markdown else TextSplitter
                    self._built = kind.from_tiktoken_model(
                        self.tokenizer_model,
                        self.max_tokens,
                        overlap=self.overlap_tokens,
                        trim=True,
                    )
        return self._built

    @property
    def fingerprint(self) -> str:
        """Everything that decides the chunks; a stored chunk set made otherwise is stale."""
        style = "markdown" if self.markdown else "text"
        return f"{style}:{self.tokenizer_model}:{self.max_tokens}/{self.overlap_tokens}"

    def split(self, text: str) -> list[Chunk]:
        """The chunks of ``text``, trimmed, in order; none for blank text. Deterministic."""
        pieces = [piece for piece in self._splitter.chunks(text) if piece.strip()]
        return [
            Chunk(position=position, content=piece, token_count=self.count_tokens(piece))
            for position, piece in enumerate(pieces)
        ]

    def count_tokens(self, text: str) -> int:
        """The number of tokens of ``text`` in the chunker's encoding."""
        if not text:
            return 0
        # Exact and cheap (tiktoken on the splitter's own ranks, loaded on first use: about
        # 30 MiB) where the encoding allows it; else bisection (~10 splitter runs a chunk).
        count = counter_for_model(self.tokenizer_model)
        return count(text) if count is not None else self.count_tokens_by_bisection(text)

    def count_tokens_by_bisection(self, text: str) -> int:
        """:meth:`count_tokens` measured with the splitter alone (slow; the reference)."""
        if not text:
            return 0
        # The splitter exposes no counter, but it keeps a text whole exactly when the text
        # fits its capacity: the smallest capacity that does is the text's token count,
        # measured by the very encoding that sized the chunk.
        high = max(1, self.max_tokens)
        while not self._fits(text, high):  # our own chunks fit at once; other texts may not
            high *= 2
        low = 1
        while low < high:
            middle = (low + high) // 2
            if self._fits(text, middle):
                high = middle
            else:
                low = middle + 1
        return low

    def _fits(self, text: str, capacity: int) -> bool:
        splitter = _whole_splitter(self.tokenizer_model, capacity)
        return len(splitter.chunks(text)) == 1
