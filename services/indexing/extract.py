"""Turn an uploaded document's bytes into text, or fail with a short reason a user can act on.

:func:`extract` reads PDF (pypdf; a page without a text layer is OCRed, see
:mod:`services.indexing.ocr`), DOCX (python-docx, as markdown), HTML (the web kernel's
extractor, as markdown), Markdown and plain text. The type comes from the bytes first (a PDF
header, a ZIP holding ``word/document.xml``), then the declared content type, then the file
name's extension; a declared type the bytes contradict is unsupported.

Every failure is :class:`ExtractionFailed`, an ``Unrecoverable`` (the same bytes fail the
same way on every attempt), whose ``reason`` starts with one of the seed's buckets:
``zero-byte file``, ``content over 10 MB``, ``unsupported content type``, ``truncated or
unreadable file`` and ``no extractable text``; a few add a hint in parentheses.

Memory: the input is never copied (pypdf and python-docx read it through a ``BytesIO``,
which shares its buffer); text is decoded once, and normalising it builds at most one more
string, none when it is already clean. HTML costs more: the web kernel's extractor builds a
parse tree and renders markdown from it.
"""

from __future__ import annotations

import os.path
import re
import zipfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from io import BytesIO
from typing import Any

import docx
from docx.enum.style import WD_STYLE_TYPE
from docx.table import Table
from docx.text.paragraph import Paragraph
from pypdf import PageObject, PasswordType, PdfReader

from services.indexing.cpu_gate import UNGATED
from services.indexing.ocr import DEFAULT_OCR_LIMITS, OcrLimits, ocr_pdf_pages
from services.indexing.text_decoding import NotText, decode_text
from services.web.html import extract_html
from shared.errors import Unrecoverable

MAX_BYTES = 10 * 1024 * 1024

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
HTML = "text/html"
MARKDOWN = "text/markdown"
TEXT = "text/plain"

ZERO_BYTES = "zero-byte file"
UNSUPPORTED = "unsupported content type"
UNREADABLE = "truncated or unreadable file"
PASSWORD_PROTECTED = "truncated or unreadable file (password-protected PDF)"
NO_TEXT = "no extractable text"
NO_PDF_TEXT = "no extractable text (scanned PDF? OCR found nothing)"
NO_PDF_TEXT_OCR_OFF = "no extractable text (scanned PDF? OCR is off)"
NO_PDF_TEXT_OCR_TIMEOUT = "no extractable text (scanned PDF? OCR ran out of time)"

_DECLARED = {
    "application/pdf": PDF,
    "application/x-pdf": PDF,
    DOCX: DOCX,
    "text/html": HTML,
    "application/xhtml+xml": HTML,
    "text/markdown": MARKDOWN,
    "text/x-markdown": MARKDOWN,
    "text/plain": TEXT,
}
# Declared types that say nothing about the content: the extension decides.
_GENERIC = frozenset({"", "application/octet-stream", "binary/octet-stream", "application/unknown"})
_EXTENSIONS = {
    ".pdf": PDF,
    ".docx": DOCX,
    ".html": HTML,
    ".htm": HTML,
    ".xhtml": HTML,
    ".md": MARKDOWN,
    ".markdown": MARKDOWN,
    ".txt": TEXT,
    ".text": TEXT,
}

_ZIP_MAGIC = b"PK\x03\x04"
_DOCX_PART = "word/document.xml"
_DOCX_MAIN_TYPE = b"wordprocessingml.document.main+xml"
# A DOCX that unpacks to more than this is treated as a ZIP bomb.
_MAX_UNPACKED_FACTOR = 16
# Acrobat accepts a PDF header within the first 1024 bytes and %%EOF within the last 1024;
# an HTML page's start is looked for as far.
_HEAD_BYTES = 1024
_HTML_START = re.compile(rb"\s*(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html)[\s>]", re.I | re.S)
_TRAILING_SPACE = re.compile(r"[^\S\n]+$", re.MULTILINE)
_BLANK_LINES = re.compile(r"\n{3,}")
_FIRST_HEADING = re.compile(r"^#[ \t]+(.+)$", re.MULTILINE)
_HEADING_STYLE = re.compile(r"heading ([1-9])\b", re.I)


class ExtractionFailed(Unrecoverable):
    """The document cannot be turned into text; ``reason`` is short and user-facing."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Extracted:
    """A document's text.

    Attributes:
      text: the content, markdown for DOCX and HTML; whitespace normalised, never empty.
      title: from the document's metadata (or its first ``#`` heading), when it has one.
      detected_type: the media type the content was read as (``application/pdf``, ...).
    """

    text: str
    title: str | None
    detected_type: str


def extract(
    data: bytes,
    *,
    content_type: str | None,
    filename: str | None,
    max_bytes: int = MAX_BYTES,
    ocr: OcrLimits = DEFAULT_OCR_LIMITS,
    cpu: AbstractContextManager[object] = UNGATED,
) -> Extracted:
    """The text of an uploaded document.

    Parameters:
      data: the document's bytes.
      content_type: the declared media type, parameters allowed (``text/plain; charset=...``).
      filename: the uploaded file's name; its extension is used when the type is unknown.
      max_bytes: a larger input, or a longer text, is refused.
      ocr: how many PDF pages without a text layer may be OCRed, and for how long
        (:mod:`services.indexing.ocr`).
      cpu: held while the bytes are parsed (everything but OCR, which runs outside the
        GIL): the caller's :mod:`~services.indexing.cpu_gate`, or nothing.

    Returns:
      The normalised text, the title and the detected media type.

    Raises:
      ExtractionFailed: with one of the module's reasons.
    """
    if not data:
        raise ExtractionFailed(ZERO_BYTES)
    if len(data) > max_bytes:
        raise ExtractionFailed(_over_limit(max_bytes))
    media_type, charset = _parse_content_type(content_type)
    kind = _detect(data, media_type, filename)
    title: str | None
    empty_reason = NO_TEXT
    with cpu:
        if kind == PDF:
            title, pages, texts = _read_pdf(data)
        elif kind == DOCX:
            title, text = _read_docx(data)
        elif kind == HTML:
            title, text, _ = extract_html(_decode(data, charset, html=True), "")
        else:
            text = _decode(data, charset, html=False)
            title = _first_heading(text) if kind == MARKDOWN else None
    if kind == PDF:
        text, empty_reason = _ocr_blank_pages(pages, texts, ocr)
    text = _normalise(text)
    if not text:
        raise ExtractionFailed(empty_reason)
    if len(text) > max_bytes:
        raise ExtractionFailed(_over_limit(max_bytes))
    return Extracted(text, title, kind)


# -- type detection ------------------------------------------------------------------------


def _over_limit(max_bytes: int) -> str:
    mib = 1024 * 1024
    size = f"{max_bytes // mib} MB" if max_bytes % mib == 0 else f"{max_bytes} bytes"
    return f"content over {size}"


def _parse_content_type(content_type: str | None) -> tuple[str, str | None]:
    media_type, *params = (content_type or "").split(";")
    charset = None
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'")
    return media_type.strip().lower(), charset


def _detect(data: bytes, media_type: str, filename: str | None) -> str:
    """The media type to read ``data`` as: the bytes' magic, else the declaration (which the
    bytes must not contradict), else HTML or text by the look of the bytes."""
    if data.startswith(b"%PDF-"):
        return PDF
    declared = _declared_kind(media_type, filename)
    if data.startswith(_ZIP_MAGIC):
        return _sniff_zip(data, declared_docx=declared == DOCX)
    if declared == PDF:
        if data.find(b"%PDF-", 0, _HEAD_BYTES) >= 0:
            return PDF
        raise ExtractionFailed(UNSUPPORTED)
    if declared == DOCX:
        raise ExtractionFailed(UNSUPPORTED)
    if declared is not None:
        return declared
    return HTML if _HTML_START.match(data, 0, _HEAD_BYTES) else TEXT


def _declared_kind(media_type: str, filename: str | None) -> str | None:
    """What the content type, else the extension, says; None when neither says anything."""
    if media_type not in _GENERIC:
        if media_type in _DECLARED:
            return _DECLARED[media_type]
        if media_type.startswith("text/"):
            return TEXT
        raise ExtractionFailed(UNSUPPORTED)
    extension = os.path.splitext(filename or "")[1].lower()
    return _EXTENSIONS.get(extension)


def _sniff_zip(data: bytes, *, declared_docx: bool) -> str:
    """DOCX when the ZIP is a WordprocessingML document; other ZIPs are unsupported."""
    try:
        with zipfile.ZipFile(BytesIO(data)) as archive:
            infos = archive.infolist()
            names = {info.filename for info in infos}
            if _DOCX_PART not in names:
                raise ExtractionFailed(UNSUPPORTED)
            # Checked here while the archive is open: python-docx unpacks every part.
            if sum(info.file_size for info in infos) > _MAX_UNPACKED_FACTOR * MAX_BYTES:
                raise ExtractionFailed(UNREADABLE)
            content_types = archive.read("[Content_Types].xml")
    except (zipfile.BadZipFile, KeyError, EOFError, OSError, RuntimeError, ValueError) as exc:
        # A truncated ZIP has no central directory, but its local headers name its parts.
        if declared_docx or _DOCX_PART.encode() in data:
            raise ExtractionFailed(UNREADABLE) from exc
        raise ExtractionFailed(UNSUPPORTED) from exc
    if _DOCX_MAIN_TYPE not in content_types:  # a macro-enabled document or a template
        raise ExtractionFailed(UNSUPPORTED)
    return DOCX


# -- readers -------------------------------------------------------------------------------


@contextmanager
def _reading() -> Iterator[None]:
    """Parser errors become ``truncated or unreadable file``.

    A parser fed untrusted bytes can fail in any way (``KeyError``, ``IndexError``, its own
    errors); none of them would go away on a retry.
    """
    try:
        yield
    except (ExtractionFailed, MemoryError):
        raise
    except Exception as exc:
        raise ExtractionFailed(UNREADABLE) from exc


def _read_pdf(data: bytes) -> tuple[str | None, list[PageObject], list[str]]:
    """The PDF's title, its pages and their text layers."""
    if data.rfind(b"%%EOF", max(0, len(data) - _HEAD_BYTES)) < 0:
        raise ExtractionFailed(UNREADABLE)
    with _reading():
        # An encrypted PDF opens when its user password is empty (owner-only restrictions).
        reader = PdfReader(BytesIO(data))
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            raise ExtractionFailed(PASSWORD_PROTECTED)
        pages = list(reader.pages)
        texts = [page.extract_text() for page in pages]
        metadata = reader.metadata
        title = _clean(metadata.title if metadata is not None else None)
    return title, pages, texts


def _ocr_blank_pages(pages: list[PageObject], texts: list[str], ocr: OcrLimits) -> tuple[str, str]:
    """The PDF's text, its pages without a text layer OCRed within ``ocr``, and the reason
    to give if that text is empty."""
    blank = [index for index, text in enumerate(texts) if not text.strip()]
    reason = NO_PDF_TEXT
    if blank and ocr.max_pages <= 0:
        reason = NO_PDF_TEXT_OCR_OFF
    elif blank:
        result = ocr_pdf_pages([pages[index] for index in blank], ocr)
        for position, text in result.texts.items():
            texts[blank[position]] = text
        if result.timed_out:
            reason = NO_PDF_TEXT_OCR_TIMEOUT
    return "\n\n".join(texts), reason


def _read_docx(data: bytes) -> tuple[str | None, str]:
    with _reading():
        document = docx.Document(BytesIO(data))
        styles = _StyleNames(document)
        blocks = [_block_markdown(block, styles) for block in document.iter_inner_content()]
        title = _clean(document.core_properties.title)
    text = "\n\n".join(block for block in blocks if block)
    return title or _first_heading(text), text


class _StyleNames:
    """A document's paragraph style names by style id, each looked up once: python-docx's
    ``Paragraph.style`` resolves a paragraph without its own style to the document's default
    by scanning every style, paragraph after paragraph (a quarter of an ingestion worker's
    CPU on the benchmark's documents). The name is what ``paragraph.style.name`` gives."""

    def __init__(self, document: Any) -> None:
        self.part = document.part
        self.names: dict[str | None, str | None] = {}

    def of(self, paragraph: Paragraph) -> str | None:
        style_id = paragraph._p.style
        if style_id not in self.names:
            style = self.part.get_style(style_id, WD_STYLE_TYPE.PARAGRAPH)
            self.names[style_id] = style.name if style is not None else None
        return self.names[style_id]


def _block_markdown(block: Paragraph | Table, styles: _StyleNames) -> str:
    if isinstance(block, Table):
        return _table_markdown(block)
    text = block.text.strip()
    style = styles.of(block)
    if not text or not style:
        return text
    heading = _HEADING_STYLE.match(style)
    if heading is not None or style == "Title":
        level = min(int(heading.group(1)), 6) if heading is not None else 1
        return "#" * level + " " + " ".join(text.split())
    if style.startswith("List Bullet"):
        return "- " + text
    if style.startswith("List Number"):
        return "1. " + text
    return text


def _table_markdown(table: Table) -> str:
    rows = [
        [" ".join(cell.text.split()).replace("|", "\\|") for cell in row.cells]
        for row in table.rows
    ]
    rows = [row for row in rows if any(row)]
    if not rows:
        return ""
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    lines.insert(1, "|" + " --- |" * len(rows[0]))
    return "\n".join(lines)


# -- text ----------------------------------------------------------------------------------


def _decode(data: bytes, charset: str | None, *, html: bool) -> str:
    try:
        return decode_text(data, charset, html=html)
    except NotText as exc:
        raise ExtractionFailed(UNREADABLE if exc.damaged else UNSUPPORTED) from exc


def _normalise(text: str) -> str:
    """Unix line ends, no trailing spaces, at most one blank line in a row, stripped."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _TRAILING_SPACE.sub("", text)
    return _BLANK_LINES.sub("\n\n", text).strip()


def _first_heading(text: str) -> str | None:
    match = _FIRST_HEADING.search(text)
    return _clean(match.group(1)) if match is not None else None


def _clean(text: str | None) -> str | None:
    cleaned = " ".join((text or "").split())
    return cleaned or None
