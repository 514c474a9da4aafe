"""The process's CPU gate (services.indexing.cpu_gate): which embedders get it, and what
extraction holds it around (the parsing, never OCR)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import pytest

from services.indexing import extract as extract_module
from services.indexing.cpu_gate import GATED_MAX_SIZE, UNGATED, cpu_bound, cpu_gate_for
from services.indexing.embedders import HashingEmbedder, OpenAICompatibleEmbedder
from services.indexing.extract import ExtractionFailed, extract
from services.indexing.ocr import OcrLimits
from testkit.scans import scanned_pdf


class _Recorder:
    """A gate that records when it is held."""

    def __init__(self) -> None:
        self.held = False
        self.entered = 0

    def __enter__(self) -> None:
        assert not self.held, "the gate is not re-entered"
        self.held, self.entered = True, self.entered + 1

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.held = False


class _Sleepy:
    """An embedder that does not say it is CPU-bound (a provider's client)."""

    name = "sleepy"
    dimensions = 2

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]


def test_the_hashing_embedder_gets_the_one_process_gate() -> None:
    gate = cpu_gate_for(HashingEmbedder(), 1)

    assert cpu_bound(HashingEmbedder(16))
    assert gate is cpu_gate_for(HashingEmbedder(16), GATED_MAX_SIZE)
    assert isinstance(gate, type(threading.Lock()))


def test_a_step_over_more_than_the_gated_size_runs_ungated() -> None:
    assert cpu_gate_for(HashingEmbedder(), GATED_MAX_SIZE + 1) is UNGATED


def test_an_embedder_not_marked_cpu_bound_gets_no_gate() -> None:
    provider = OpenAICompatibleEmbedder("http://127.0.0.1:9/v1", "", "m", 8)
    try:
        assert not cpu_bound(provider) and cpu_gate_for(provider, 1) is UNGATED
    finally:
        provider.close()
    assert cpu_gate_for(_Sleepy(), 1) is UNGATED
    marked_loosely = _Sleepy()
    marked_loosely.cpu_bound = "yes"  # type: ignore[attr-defined]
    assert cpu_gate_for(marked_loosely, 1) is UNGATED


@pytest.mark.parametrize(
    ("data", "content_type"),
    [
        (b"# Refunds\n\nWithin thirty days.", "text/markdown"),
        (b"<html><body><main><p>Within thirty days.</p></main></body></html>", "text/html"),
    ],
)
def test_extraction_parses_under_the_gate_once(data: bytes, content_type: str) -> None:
    gate = _Recorder()

    text = extract(data, content_type=content_type, filename=None, cpu=gate).text

    assert "thirty days" in text and gate.entered == 1 and not gate.held


def test_a_parser_failure_lets_go_of_the_gate() -> None:
    gate = _Recorder()

    with pytest.raises(ExtractionFailed):
        extract(b"%PDF-1.4 truncated", content_type="application/pdf", filename=None, cpu=gate)

    assert gate.entered == 1 and not gate.held


def test_ocr_runs_outside_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = _Recorder()
    held_during_ocr: list[bool] = []
    real_ocr = extract_module.ocr_pdf_pages

    def watched(pages: Any, limits: OcrLimits) -> Any:
        held_during_ocr.append(gate.held)
        return real_ocr(pages, limits)

    monkeypatch.setattr(extract_module, "ocr_pdf_pages", watched)
    lines = ["Refunds are processed within 14 days"]

    text = extract(scanned_pdf([lines]), content_type="application/pdf", filename=None, cpu=gate)

    assert text.text == lines[0]
    assert held_during_ocr == [False] and gate.entered == 1
