"""OCR of scanned PDFs (services.indexing.ocr through extract): real RapidOCR on PDFs made of
page images with no text layer (testkit.scans), offline."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from pypdf import PdfReader

from services.indexing import ocr
from services.indexing.extract import (
    NO_PDF_TEXT,
    NO_PDF_TEXT_OCR_OFF,
    NO_PDF_TEXT_OCR_TIMEOUT,
    PDF,
    ExtractionFailed,
    extract,
)
from services.indexing.ocr import NO_OCR, OcrLimits, ocr_pdf_pages
from testkit.scans import scanned_pdf

INVOICE = ["Quarterly invoice reconciliation", "Refunds are processed within 14 days"]


def reason(data: bytes, limits: OcrLimits = ocr.DEFAULT_OCR_LIMITS) -> str:
    with pytest.raises(ExtractionFailed) as failed:
        extract(data, content_type="application/pdf", filename=None, ocr=limits)
    return failed.value.reason


def test_the_scan_has_no_text_layer() -> None:
    import io

    reader = PdfReader(io.BytesIO(scanned_pdf([INVOICE])))
    assert reader.pages[0].extract_text().strip() == ""
    assert len(reader.pages[0].images) == 1


def test_a_scanned_page_is_read_by_ocr() -> None:
    result = extract(scanned_pdf([INVOICE]), content_type="application/pdf", filename="scan.pdf")

    assert result.detected_type == PDF
    assert result.text == "\n".join(INVOICE)


def test_a_blank_scan_fails_with_the_ocr_reason() -> None:
    assert reason(scanned_pdf([[], []])) == NO_PDF_TEXT


def test_with_ocr_off_a_scan_fails_saying_so() -> None:
    assert reason(scanned_pdf([INVOICE]), NO_OCR) == NO_PDF_TEXT_OCR_OFF


def test_only_the_first_max_pages_pages_without_text_are_read() -> None:
    pdf = scanned_pdf([["Alpha walrus page"], ["Beta narwhal page"], ["Gamma otter page"]])

    text = extract(pdf, content_type=None, filename=None, ocr=OcrLimits(max_pages=2)).text

    assert "walrus" in text and "narwhal" in text
    assert "otter" not in text


def test_no_page_is_started_after_the_time_bound() -> None:
    import io

    pages = PdfReader(io.BytesIO(scanned_pdf([["Alpha walrus"], ["Beta narwhal"]]))).pages
    ticks = itertools.count(0.0, 20.0)  # each reading of the clock is 20 s later

    result = ocr_pdf_pages(list(pages), OcrLimits(timeout_seconds=15.0), clock=lambda: next(ticks))

    assert (result.pages, result.skipped, result.timed_out) == (1, 1, True)
    assert "walrus" in result.texts[0]


def test_a_scan_whose_pages_all_ran_out_of_time_says_so(monkeypatch: Any) -> None:
    # The first page is always read; a blank first page and a bound already passed leave
    # the second unread: the reason names the time bound, not an empty scan.
    ticks = itertools.count(0.0, 200.0)
    real = ocr_pdf_pages

    def ticking(pages: Any, limits: OcrLimits) -> ocr.OcrResult:
        return real(pages, limits, clock=lambda: next(ticks))

    monkeypatch.setattr("services.indexing.extract.ocr_pdf_pages", ticking)

    assert reason(scanned_pdf([[], ["Beta narwhal"]])) == NO_PDF_TEXT_OCR_TIMEOUT


def test_a_pdf_with_a_text_layer_is_not_ocred(monkeypatch: Any) -> None:
    from tests.unit.services.indexing.test_extract import make_pdf

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("OCR ran on a page with text")

    monkeypatch.setattr("services.indexing.extract.ocr_pdf_pages", refuse)

    assert extract(make_pdf([["Hello"]]), content_type=None, filename=None).text == "Hello"
