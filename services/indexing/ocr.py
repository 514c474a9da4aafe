"""OCR of scanned PDF pages: the text of a page that has none, read from its images.

A scanned PDF is one image per page and no text layer, so :mod:`services.indexing.extract`
finds no text in it. :func:`ocr_pdf_pages` reads the images of such pages with RapidOCR
(``rapidocr-onnxruntime``: PaddleOCR's detection, orientation and recognition models
converted to ONNX, shipped inside the wheel and run by onnxruntime on the CPU; nothing is
downloaded, so it works offline). It recognises Latin script and Chinese; other scripts
come out as nothing or as noise.

Bounds (:class:`OcrLimits`, settings ``SPEEDTIER_OCR_MAX_PAGES`` and
``SPEEDTIER_OCR_TIMEOUT_SECONDS``): at most ``max_pages`` pages of one document are OCRed
(the first ones without text; later ones are left out), and no page is started once
``timeout_seconds`` have passed since the first (a page already started runs to its end: the
ONNX run cannot be interrupted, so the bound can be overrun by one page, about a second or
two on this project's 2-core machine). An image larger than :data:`MAX_IMAGE_SIDE` pixels on
its longer side is scaled down first, and greyscaled and median-filtered (3x3) to take out
JPEG ringing. ``max_pages = 0`` turns OCR off.

The engine is loaded once per process (about 0.7 s, about 100 MB resident), on the first
scanned page, not at import.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

#: An image's longer side is scaled down to this many pixels before recognition (an A4 page
#: scanned at 200 dpi is 2339 pixels high; more only costs time).
MAX_IMAGE_SIDE = 2400
#: Images smaller than this on either side (logos, rules, bullets) are not read.
MIN_IMAGE_SIDE = 16
#: A recognised line below this confidence is dropped (RapidOCR reads noise at ~0.3-0.5).
MIN_CONFIDENCE = 0.5


@dataclass(frozen=True)
class OcrLimits:
    """How much OCR one document may get.

    Attributes:
      max_pages: pages without a text layer OCRed per document (0: OCR off).
      timeout_seconds: no page is started after this many seconds of OCR on one document.
    """

    max_pages: int = 20
    timeout_seconds: float = 120.0


DEFAULT_OCR_LIMITS = OcrLimits()
NO_OCR = OcrLimits(max_pages=0)


@dataclass(frozen=True)
class OcrResult:
    """What the OCR pass read.

    Attributes:
      texts: each OCRed page's text (possibly empty), by page index.
      pages: pages OCRed.
      skipped: pages without text left out by the limits.
      timed_out: the time bound stopped the pass.
    """

    texts: dict[int, str]
    pages: int
    skipped: int
    timed_out: bool


_engine: Any = None
_engine_lock = threading.Lock()


def _load_engine() -> Any:
    global _engine
    with _engine_lock:
        if _engine is None:
            from rapidocr_onnxruntime import RapidOCR  # type: ignore[import-untyped]

            _engine = RapidOCR()
        return _engine


def ocr_image(image: Any) -> str:
    """The text RapidOCR reads in a PIL image, one recognised line per line, top to bottom
    (empty when it reads nothing)."""
    import numpy as np
    from PIL import ImageFilter

    width, height = image.size
    if min(width, height) < MIN_IMAGE_SIDE:
        return ""
    longest = max(width, height)
    if longest > MAX_IMAGE_SIDE:
        scale = MAX_IMAGE_SIDE / longest
        image = image.resize((max(1, int(width * scale)), max(1, int(height * scale))))
    # A 3x3 median filter takes out JPEG ringing (most scans are JPEG in the PDF), which
    # otherwise makes the recogniser drop the spaces between words.
    image = image.convert("L").filter(ImageFilter.MedianFilter(3)).convert("RGB")
    result, _elapsed = _load_engine()(np.asarray(image))
    lines = [
        (box[0][1], box[0][0], text)
        for box, text, confidence in result or []
        if float(confidence) >= MIN_CONFIDENCE and text.strip()
    ]
    lines.sort(key=lambda line: (round(line[0] / 10), line[1]))
    return "\n".join(text.strip() for _y, _x, text in lines)


def ocr_pdf_pages(
    pages: Sequence[Any],
    limits: OcrLimits,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> OcrResult:
    """OCR the given pypdf pages (the ones without a text layer), within ``limits``.

    A page whose images cannot be decoded reads as empty (the caller fails the document
    when no page has text)."""
    texts: dict[int, str] = {}
    started = clock()
    timed_out = False
    done = 0
    for index, page in enumerate(pages):
        if done >= limits.max_pages:
            break
        if done and clock() - started >= limits.timeout_seconds:
            timed_out = True
            break
        texts[index] = "\n".join(text for text in map(ocr_image, _page_images(page)) if text)
        done += 1
    skipped = len(pages) - done
    if skipped:
        log.info(
            "OCR: %s of %s pages without text left out (%s)",
            skipped,
            len(pages),
            "time bound" if timed_out else "page bound",
        )
    return OcrResult(texts, done, skipped, timed_out)


def _page_images(page: Any) -> Iterable[Any]:
    try:
        images = list(page.images)
    except Exception as exc:  # an untrusted PDF's image can fail to decode in any way
        log.info("OCR: a page's images cannot be read (%s)", exc)
        return []
    decoded = []
    for image in images:
        try:
            decoded.append(image.image)
        except Exception as exc:
            log.info("OCR: an image cannot be decoded (%s)", exc)
    return [image for image in decoded if image is not None]
