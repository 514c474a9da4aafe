"""Exact token counts in the splitter's own encoding, without the network.

``semantic-text-splitter`` sizes chunks with the tiktoken encodings compiled into its wheel
but exposes no counter. tiktoken (the Python package) counts in microseconds, but downloads
its rank files at run time. This module gives tiktoken the splitter's compiled-in
``cl100k_base`` ranks instead: it finds them in the splitter's shared library, checks that
they are byte for byte the published file (its SHA-256, the hash tiktoken itself checks) and
builds the encoding with the same pre-tokenizer pattern, so a count is the one the splitter
sized the chunk with. Where that is impossible (another encoding, another splitter build),
:func:`counter_for_model` answers ``None`` and the chunker keeps counting by bisection.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import mmap
import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

logger = logging.getLogger(__name__)

#: The published ``cl100k_base.tiktoken`` (tiktoken checks the same hash on download).
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
CL100K_RANKS = 100_256
#: cl100k_base's pre-tokenizer, as tiktoken and the splitter's tiktoken-rs both define it.
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++"""
    r"""[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_RANK_FILE = re.compile(rb"IQ== 0\n(?:[A-Za-z0-9+/=]+ \d+\n)+")

Counter = Callable[[str], int]


@lru_cache(maxsize=8)
def counter_for_model(model: str) -> Counter | None:
    """A function counting ``model``'s tokens of a text (``encode_ordinary``), or ``None``."""
    try:
        from tiktoken.model import encoding_name_for_model

        if encoding_name_for_model(model) != "cl100k_base":
            return None
        encoding = _cl100k()
    except Exception:  # any failure means: count by bisection instead
        logger.warning("no fast token counter for %s; counting by bisection", model)
        return None
    if encoding is None:
        return None
    encode = encoding.encode_ordinary
    return lambda text: len(encode(text))


def _cl100k() -> tiktoken.Encoding | None:
    import semantic_text_splitter
    import tiktoken

    ranks = _compiled_ranks(Path(semantic_text_splitter.__file__).parent)
    if ranks is None:
        return None
    return tiktoken.Encoding(
        "cl100k_base", pat_str=CL100K_PATTERN, mergeable_ranks=ranks, special_tokens={}
    )


def _compiled_ranks(package: Path) -> dict[bytes, int] | None:
    for library in sorted(package.glob("*.so")) + sorted(package.glob("*.pyd")):
        with (
            library.open("rb") as file,
            mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data,
        ):
            blocks = [match.group(0) for match in _RANK_FILE.finditer(data)]
        for block in blocks:
            if block.count(b"\n") != CL100K_RANKS:
                continue
            if hashlib.sha256(block).hexdigest() != CL100K_SHA256:
                continue
            ranks: dict[bytes, int] = {}
            for line in block.splitlines():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
            return ranks
    return None
