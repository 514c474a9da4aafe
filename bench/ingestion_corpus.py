"""Documents for the ingestion benchmark: text, Markdown, HTML and DOCX of varying sizes.

The prose is random sentences over the lower-case words of a few standard-library modules'
source (docstrings, comments and identifiers), drawn with their frequencies, so it tokenizes
like English technical text (about 4.7 characters a token) and its words repeat as a real
corpus's do. Everything is seeded: the same arguments give the same documents.
"""

from __future__ import annotations

import importlib.util
import io
import random
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

KINDS = ("text", "markdown", "html", "docx")
CONTENT_TYPES = {
    "text": "text/plain; charset=utf-8",
    "markdown": "text/markdown; charset=utf-8",
    "html": "text/html; charset=utf-8",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
}
EXTENSIONS = {"text": ".txt", "markdown": ".md", "html": ".html", "docx": ".docx"}
#: (share of documents, smallest and largest text size in bytes): mostly small documents,
#: a tail of large ones, as a knowledge base's uploads are.
SIZE_BANDS = ((0.6, 1_000, 6_000), (0.3, 6_000, 24_000), (0.1, 24_000, 96_000))
_SOURCES = ("argparse", "difflib", "textwrap", "logging", "subprocess", "unittest.case")
_WORD = re.compile(r"\b[a-z]{2,14}\b")


@dataclass(frozen=True)
class Document:
    name: str
    kind: str
    data: bytes
    text_bytes: int

    @property
    def content_type(self) -> str:
        return CONTENT_TYPES[self.kind]

    @property
    def filename(self) -> str:
        return self.name + EXTENSIONS[self.kind]


@lru_cache(maxsize=1)
def vocabulary() -> tuple[list[str], list[int]]:
    """Words of the standard library's docstrings and comments, and how often each occurs."""
    counts: Counter[str] = Counter()
    for module in _SOURCES:
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            continue
        counts.update(_WORD.findall(Path(spec.origin).read_text(errors="replace").lower()))
    words = [word for word, _ in counts.most_common(6000)]
    return words, [counts[word] for word in words]


class Prose:
    """Random English-like sentences, paragraphs and headings from one seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.words, self.weights = vocabulary()

    def sentence(self) -> str:
        words = self.rng.choices(self.words, self.weights, k=self.rng.randint(8, 22))
        return " ".join(words).capitalize() + "."

    def paragraph(self) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randint(3, 7)))

    def heading(self) -> str:
        return " ".join(self.rng.choices(self.words, k=self.rng.randint(2, 5))).capitalize()

    def sections(self, size: int) -> list[tuple[str, list[str]]]:
        """Headed sections of paragraphs, about ``size`` bytes of text in all."""
        sections: list[tuple[str, list[str]]] = []
        total = 0
        while total < size:
            paragraphs = [self.paragraph() for _ in range(self.rng.randint(1, 4))]
            sections.append((self.heading(), paragraphs))
            total += sum(len(p) + 2 for p in paragraphs)
        return sections


def render(kind: str, title: str, sections: list[tuple[str, list[str]]]) -> bytes:
    if kind == "text":
        parts = [title, ""] + ["\n\n".join([h, *ps]) for h, ps in sections]
        return "\n\n".join(parts).encode()
    if kind == "markdown":
        parts = [f"# {title}"] + [f"## {h}\n\n" + "\n\n".join(ps) for h, ps in sections]
        return "\n\n".join(parts).encode()
    if kind == "html":
        body = "".join(f"<h2>{h}</h2>" + "".join(f"<p>{p}</p>" for p in ps) for h, ps in sections)
        return (
            f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head>"
            f"<body><nav><a href='/'>Home</a></nav><main><h1>{title}</h1>{body}</main>"
            "<footer>Sample footer</footer></body></html>"
        ).encode()
    import docx

    document = docx.Document()
    document.add_heading(title, level=0)
    for heading, paragraphs in sections:
        document.add_heading(heading, level=1)
        for paragraph in paragraphs:
            document.add_paragraph(paragraph)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def text_size(rng: random.Random) -> int:
    share = rng.random()
    for band_share, low, high in SIZE_BANDS:
        if share < band_share:
            return int(low * (high / low) ** rng.random())  # log-uniform within the band
        share -= band_share
    return SIZE_BANDS[-1][2]


def corpus(count: int, *, seed: int = 3, prefix: str = "doc") -> list[Document]:
    """``count`` documents, the kinds in turn, sizes drawn from :data:`SIZE_BANDS`."""
    rng = random.Random(seed)
    prose = Prose(seed)
    documents = []
    for i in range(count):
        kind = KINDS[i % len(KINDS)]
        size = text_size(rng)
        data = render(kind, f"Document {prefix} {i}", prose.sections(size))
        documents.append(Document(f"{prefix}-{i:05d}", kind, data, size))
    return documents


def big_text(size: int, *, seed: int = 10) -> bytes:
    """Plain text of exactly ``size`` bytes (the 10 MB memory probe)."""
    prose = Prose(seed)
    paragraphs: list[str] = []
    total = 0
    while total < size:
        paragraph = prose.paragraph()
        paragraphs.append(paragraph)
        total += len(paragraph) + 2
    return "\n\n".join(paragraphs).encode()[:size]
