"""URLs as the crawler and URL documents store them, and the origin a URL belongs to."""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

import pydantic_core

from shared.errors import Unrecoverable

MAX_URL_LENGTH = 2083  # what pydantic's HttpUrl, and so the crawl_url request, accepts


def normalize_url(url: str, base: str | None = None) -> str | None:
    """``url`` (resolved against ``base``) as the crawl stores it, or None when it is not a
    usable http(s) URL (mailto:, javascript:, credentials, unparsable, too long).

    Normalisation is WHATWG's, the same as pydantic's ``HttpUrl`` that validates crawl_url
    requests: lower-case scheme and host, IDNA, default port and dot segments removed, an
    empty path as ``/``. The fragment is dropped.
    """
    raw = url.strip()
    if base is not None:
        raw = urljoin(base, raw)
    try:
        parsed = pydantic_core.Url(raw)
    except ValueError:
        return None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        return None
    if parsed.username or parsed.password:
        return None
    text = str(parsed).split("#", 1)[0]
    return text if len(text) <= MAX_URL_LENGTH else None


def origin(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of ``url``, the port defaulted from the scheme."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname or "", port


def require_url(url: str) -> str:
    """``url`` normalised; ``Unrecoverable`` when it is not an http(s) URL."""
    normalized = normalize_url(url)
    if normalized is None:
        raise Unrecoverable(f"{url!r} is not an http(s) URL")
    return normalized
