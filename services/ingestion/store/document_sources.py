"""What a document is made from: an uploaded file, posted text or a URL, and the columns
each sets on the document."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.web.urls import normalize_url
from shared.db.models.ingestion import MAX_SOURCE_BYTES
from shared.errors import SpeedtierError

MAX_CRAWL_DEPTH = 5


class DocumentTooLarge(SpeedtierError):
    """The source is over the 10 MB content limit (the API answers 413)."""


@dataclass(frozen=True)
class FileSource:
    """An uploaded file: its bytes, declared content type and file name."""

    data: bytes
    content_type: str | None = None
    filename: str | None = None


@dataclass(frozen=True)
class TextSource:
    """Text posted as JSON."""

    text: str


@dataclass(frozen=True)
class UrlSource:
    """A web page, fetched by the pipeline, following same-host links ``crawl_depth`` deep."""

    url: str
    crawl_depth: int = 0


DocumentSource = FileSource | TextSource | UrlSource


def source_columns(source: DocumentSource) -> dict[str, Any]:
    """The columns a source sets (every source column, so a replacement clears the rest).

    Raises:
      DocumentTooLarge: the bytes (or text) are over 10 MB.
      ValueError: a bad URL or crawl depth.
    """
    columns: dict[str, Any] = {
        "content_type": None,
        "filename": None,
        "url": None,
        "crawl_depth": 0,
        "source_bytes": None,
    }
    if isinstance(source, FileSource):
        data = source.data
        columns.update(kind="file", content_type=source.content_type, filename=source.filename)
    elif isinstance(source, TextSource):
        data = source.text.encode()
        columns.update(kind="text", content_type="text/plain; charset=utf-8")
    else:
        url = normalize_url(source.url)
        if url is None:
            raise ValueError("url must be an absolute http(s) URL")
        if not 0 <= source.crawl_depth <= MAX_CRAWL_DEPTH:
            raise ValueError(f"crawl_depth must be between 0 and {MAX_CRAWL_DEPTH}")
        # Fetched by the pipeline; a resubmitted URL is fetched again.
        columns.update(kind="url", url=url, crawl_depth=source.crawl_depth)
        return columns
    if len(data) > MAX_SOURCE_BYTES:
        raise DocumentTooLarge("content over 10 MB")
    columns["source_bytes"] = data
    return columns
