"""URLs as the crawler and URL documents store them, and the origin a URL belongs to."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

import pydantic_core
from pydantic_core import PydanticCustomError

from shared.errors import Unrecoverable
from shared.inputs import StringRule, refuse_nul

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


# -- the http(s) URL the API takes -------------------------------------------------------------

_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?"
_LAST_LABEL = r"[A-Za-z](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_PORT = r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
_PATH = r"[A-Za-z0-9!$%&'()*+,\-./:;=@\[\]^_|~]"
_QUERY = r"[A-Za-z0-9!$%&()*+,\-./:;=?@\[\]^_|~`{}\\]"
_FRAGMENT = r"[A-Za-z0-9!$%&'()*+,\-./:;=?@\[\]^_|~{}\\#]"
#: An absolute http(s) URL in printable ASCII, as the API document states it and as WHATWG
#: parsing writes one: a host of dot-separated labels, the last letter-led (an IDN in its
#: ``xn--`` form), or a dotted-decimal IPv4 address; an optional port up to 65535; then
#: nothing, or a path from ``/`` with an optional query and fragment, without the characters
#: WHATWG would percent-encode (space, ``"``, ``<``, ``>``; ``\``, a backquote and braces in
#: the path; ``'`` in the query). No credentials. Such a URL's normal form is never longer.
HTTP_URL_PATTERN = (
    rf"^[Hh][Tt][Tt][Pp][Ss]?://(?:(?:{_LABEL}\.)*{_LAST_LABEL}|{_OCTET}(?:\.{_OCTET}){{3}})"
    rf"(?::{_PORT})?(?:/{_PATH}*(?:\?{_QUERY}*)?(?:#{_FRAGMENT}*)?)?$"
)
_HTTP_URL = re.compile(HTTP_URL_PATTERN)


def takeable(url: str) -> bool:
    """Whether the API would take ``url`` (:data:`HTTP_URL_PATTERN`): a link that is not
    (an IPv6 literal host, say) is not followed, since its crawl job could not be enqueued."""
    return _HTTP_URL.fullmatch(url) is not None


def whatwg_url(url: str) -> str:
    """``url`` as WHATWG parsing writes it (pydantic's ``HttpUrl``): the form job ids and the
    crawl ledger use. Raises ValueError when it does not parse."""
    return str(pydantic_core.Url(url))


def checked_http_url(value: str) -> str:
    """``value`` in its normal form (lower-case scheme and host, default port and dot
    segments removed; a bare host is left without the ``/`` WHATWG adds, so the normal form
    is never longer than what was sent and validating it again gives it back). A URL outside
    :data:`HTTP_URL_PATTERN` is a validation error."""
    if not _HTTP_URL.fullmatch(refuse_nul(value)):
        raise PydanticCustomError(
            "http_url",
            "must be an absolute http(s) URL of printable ASCII with a host name (an IDN "
            "in its xn-- form) or IPv4 address, and a path from / if anything follows",
        )
    normal = whatwg_url(value)
    bare = value.count("/") == 2
    return normal[:-1] if bare and normal.endswith("/") else normal


#: The rule of an API field holding an http(s) URL: put it after the field's ``Field(...)``
#: with its lengths in an ``Annotated`` (:func:`checked_http_url`, documented as the pattern).
HTTP_URL = StringRule(checked_http_url, HTTP_URL_PATTERN)
