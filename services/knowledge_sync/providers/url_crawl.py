"""Fetch one web page for a URL crawl, safely and politely.

:func:`fetch_page` GETs a page and turns it into markdown plus the page's same-host links.
Every request, redirect hops and robots.txt included, goes through the same SSRF guard
(:mod:`.ssrf_guard`): the host is resolved once, every address it resolves to must be public
(unless private networks are allowed), and the connection is made to the checked address
itself, so a second DNS answer cannot point the request elsewhere (no DNS rebinding between
check and connect). The residual risks are a TLS server that is reachable at the checked public
address but proxies onward, which no client-side check can see, and requests the page
makes itself, which never happen here: nothing is rendered or executed.

Failures speak the error hierarchy (:mod:`shared.http` semantics): 5xx, 429 without
Retry-After, timeouts and transport errors are ``Retryable``; 429 with Retry-After is a
``Delay``; a refused address (``ssrf_guard.AddressRefused``, with its own reason), other
4xx, an unsupported content type, a page over the size limit and too many redirects are
``Unrecoverable``. A URL robots.txt forbids raises
:class:`Disallowed`, which is not a job failure: the crawl finishes the URL without content.
"""

from __future__ import annotations

import threading
import time
import urllib.robotparser
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import pydantic_core
import requests
import urllib3.exceptions
from markdownify import markdownify
from selectolax.lexbor import LexborHTMLParser, LexborNode

from services.knowledge_sync.providers.ssrf_guard import AddressGuard, Network, address_guard
from shared.errors import Retryable, Unrecoverable
from shared.http import raise_for_status
from tiers.attempts import current_window_hold
from tiers.policies import WindowRule
from tiers.rate_window import RateWindows

MAX_PAGE_BYTES = 10 * 1024 * 1024
MAX_REDIRECTS = 5
MAX_URL_LENGTH = 2083  # what pydantic's HttpUrl, and so the crawl_url request, accepts
ROBOTS_MAX_BYTES = 500 * 1024  # RFC 9309: parse at least the first 500 KiB
DEFAULT_USER_AGENT = "speedtier-crawler"
#: One request a second per host, shared by every worker.
DEFAULT_HOST_RULE = WindowRule(1, 1.0)

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/x-markdown"})
_ACCEPT = "text/html,application/xhtml+xml;q=0.9,text/plain;q=0.8,text/markdown;q=0.8"
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_MAX_ADDRESSES_TRIED = 4

# Boilerplate dropped before conversion (links are collected before, from the whole page).
_BOILERPLATE = (
    "script, style, noscript, template, iframe, object, embed, svg, canvas, form, button, "
    "input, select, textarea, dialog, nav, aside, body > header, body > footer, [hidden], "
    '[aria-hidden="true"], [role="navigation"], [role="banner"], [role="contentinfo"], '
    '[role="search"], [role="complementary"]'
)


class Disallowed(Exception):
    """robots.txt forbids the URL: finish it without content; this is not a job failure."""

    def __init__(self, url: str) -> None:
        super().__init__(f"{url}: disallowed by robots.txt")
        self.url = url


@dataclass(frozen=True)
class CrawledPage:
    """One fetched page.

    Attributes:
      final_url: the URL after redirects (normalised, no fragment).
      title: ``og:title``, else ``<title>``, else a markdown document's first heading.
      markdown: the page's main content as markdown, boilerplate removed.
      links: absolute, normalised, de-duplicated links to the final URL's own scheme, host
        and port, in page order, without the page itself.
      status: the final response's HTTP status.
    """

    final_url: str
    title: str | None
    markdown: str
    links: list[str]
    status: int


# -- URLs ----------------------------------------------------------------------------------


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


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname or "", port


def _require_url(url: str) -> str:
    normalized = normalize_url(url)
    if normalized is None:
        raise Unrecoverable(f"{url!r} is not an http(s) URL")
    return normalized


class _PinnedTLSAdapter(requests.adapters.HTTPAdapter):
    """Connects to an address but verifies the certificate of (and sends SNI for) a name."""

    def __init__(self, hostname: str) -> None:
        self._hostname = hostname  # read by init_poolmanager, which __init__ calls
        super().__init__(max_retries=0)

    def init_poolmanager(
        self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any
    ) -> None:
        pool_kwargs.update(server_hostname=self._hostname, assert_hostname=self._hostname)
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)


def _is_connect_failure(exc: requests.RequestException) -> bool:
    if isinstance(exc, requests.ConnectTimeout):
        return True
    reason = getattr(exc.args[0] if exc.args else None, "reason", None)
    return isinstance(reason, urllib3.exceptions.NewConnectionError)


@contextmanager
def _pinned_get(
    url: str, guard: AddressGuard, *, timeout: float, user_agent: str, accept: str
) -> Iterator[requests.Response]:
    """GET ``url`` (not following redirects) on a connection to a checked address."""
    parts = urlsplit(url)
    scheme, host, port = _origin(url)
    headers = {"Host": parts.netloc, "User-Agent": user_agent, "Accept": accept}
    failure: requests.RequestException | None = None
    for address in guard.resolve(host, port, url)[:_MAX_ADDRESSES_TRIED]:
        netloc = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
        target = urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))
        session = requests.Session()
        session.trust_env = False  # a proxy from the environment would bypass the pin
        if scheme == "https":
            session.mount("https://", _PinnedTLSAdapter(host))
        try:
            response = session.get(
                target, headers=headers, timeout=timeout, stream=True, allow_redirects=False
            )
        except requests.RequestException as exc:
            session.close()
            if _is_connect_failure(exc):
                failure = exc
                continue
            raise Retryable(f"GET {url}: {type(exc).__name__}: {exc}") from exc
        try:
            yield response
        finally:
            response.close()
            session.close()
        return
    raise Retryable(f"GET {url}: cannot connect: {failure}") from failure


@contextmanager
def _get_following(
    url: str,
    guard: AddressGuard,
    *,
    timeout: float,
    user_agent: str,
    accept: str,
    robots: RobotsCache | None = None,
) -> Iterator[tuple[str, requests.Response]]:
    """GET ``url``, following up to five redirects, each hop guarded (and robots-checked)."""
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        if robots is not None:
            robots.check(current)
        with _pinned_get(
            current, guard, timeout=timeout, user_agent=user_agent, accept=accept
        ) as response:
            if response.status_code not in _REDIRECT_STATUSES:
                yield current, response
                return
            location = response.headers.get("Location")
            if not location:
                raise Unrecoverable(f"GET {current}: redirect without a Location")
            following = normalize_url(location, base=current)
            if following is None:
                raise Unrecoverable(f"GET {current}: redirect to a non-http(s) URL {location!r}")
        current = following
    raise Unrecoverable(f"GET {url}: more than {MAX_REDIRECTS} redirects")


def _size_text(size: int) -> str:
    mib = 1024 * 1024
    return f"{size // mib} MB" if size % mib == 0 else f"{size} bytes"


def _read_body(
    response: requests.Response, what: str, *, max_bytes: int, timeout: float, truncate: bool
) -> bytes:
    """At most ``max_bytes`` of the (decoded) body; more is ``Unrecoverable`` unless
    ``truncate``. ``timeout`` also bounds the whole read, against a page that trickles."""
    declared = response.headers.get("Content-Length", "")
    if not truncate and declared.isdigit() and int(declared) > max_bytes:
        raise Unrecoverable(f"{what}: content over {_size_text(max_bytes)} (Content-Length)")
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in response.iter_content(chunk_size=64 * 1024):
            size += len(chunk)
            if size > max_bytes:
                if truncate:
                    chunks.append(chunk[: len(chunk) - (size - max_bytes)])
                    break
                raise Unrecoverable(f"{what}: content over {_size_text(max_bytes)}")
            chunks.append(chunk)
            if time.monotonic() > deadline:
                raise Retryable(f"{what}: body not read within {timeout:g}s")
    except requests.RequestException as exc:
        raise Retryable(f"{what}: {type(exc).__name__}: {exc}") from exc
    return b"".join(chunks)


def _media_type(response: requests.Response) -> str:
    return response.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()


def _charset(response: requests.Response) -> str | None:
    for param in response.headers.get("Content-Type", "").split(";")[1:]:
        name, _, value = param.strip().partition("=")
        if name.strip().lower() == "charset" and value.strip():
            return value.strip().strip("\"'")
    return None


def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


# -- extraction ----------------------------------------------------------------------------


def _clean_text(text: str | None) -> str | None:
    cleaned = " ".join((text or "").split())
    return cleaned or None


def _title(tree: LexborHTMLParser) -> str | None:
    og = tree.css_first('meta[property="og:title"]')
    if og is not None and (title := _clean_text(og.attributes.get("content"))):
        return title
    node = tree.css_first("title")
    return _clean_text(node.text()) if node is not None else None


def _links(tree: LexborHTMLParser, base: str, page_url: str) -> list[str]:
    origin = _origin(page_url)
    links: dict[str, None] = {}
    for anchor in tree.css("a[href]"):
        if "nofollow" in (anchor.attributes.get("rel") or "").lower().split():
            continue
        link = normalize_url(anchor.attributes.get("href") or "", base=base)
        if link is not None and link != page_url and _origin(link) == origin:
            links.setdefault(link)
    return list(links)


def _outermost(nodes: list[LexborNode]) -> list[LexborNode]:
    """Matches that are not inside another match: destroying one frees its descendants."""
    matched = {node.mem_id for node in nodes}
    outermost = []
    for node in nodes:
        parent = node.parent
        while parent is not None and parent.mem_id not in matched:
            parent = parent.parent
        if parent is None:
            outermost.append(node)
    return outermost


def _markdown(html: str) -> str:
    text = markdownify(html, heading_style="ATX", bullets="-", strip=["img"])
    lines = [line.rstrip() for line in text.splitlines()]
    paragraphs = "\n".join(lines).split("\n\n")
    return "\n\n".join(p.strip("\n") for p in paragraphs if p.strip()).strip()


def extract_html(html: str | bytes, page_url: str) -> tuple[str | None, str, list[str]]:
    """``(title, markdown, same-host links)`` of an HTML page at ``page_url``.

    Bytes are decoded the way a browser would (BOM, then ``<meta charset>``, else UTF-8).
    """
    tree = LexborHTMLParser(html, encoding=isinstance(html, bytes))
    base = page_url
    base_tag = tree.css_first("base[href]")
    if base_tag is not None:
        base = normalize_url(base_tag.attributes.get("href") or "", base=page_url) or page_url
    title = _title(tree)
    links = _links(tree, base, page_url)
    for node in _outermost(tree.css(_BOILERPLATE)):
        node.decompose()
    for anchor in tree.css("a[href]"):
        href = anchor.attributes.get("href") or ""
        absolute = normalize_url(href, base=base)
        if absolute is not None:
            anchor.attrs["href"] = absolute
        elif href.strip().lower().startswith("javascript:"):
            del anchor.attrs["href"]
    root = tree.css_first("main") or tree.css_first('[role="main"]') or tree.body
    html_text = (root.html or "") if root is not None else ""
    return title, _markdown(html_text), links


def _text_title(text: str, media_type: str) -> str | None:
    if media_type == "text/plain":
        return None
    for line in text.splitlines():
        if line.startswith("# "):
            return _clean_text(line[2:])
    return None


# -- politeness and robots.txt -------------------------------------------------------------


class HostPoliteness:
    """At most ``rule.limit`` requests per window to one host, across all workers.

    A full window reserves the job a request in the first window with room and raises
    ``Delay`` to it (the attempt is not spent, and the job wakes once, not at every window).
    """

    def __init__(self, windows: RateWindows, rule: WindowRule = DEFAULT_HOST_RULE) -> None:
        self.windows = windows
        self.rule = rule

    def acquire(self, url: str, now: float | None = None) -> None:
        _, host, _ = _origin(url)
        self.windows.take_or_delay(
            self.windows.key("crawl-host", host),
            self.rule,
            reason="host-politeness",
            held=current_window_hold(),
            now=now,
        )


class RobotsCache:
    """robots.txt per scheme, host and port, fetched through the guard and kept ``ttl``.

    Following RFC 9309: a 4xx robots.txt (404 included) allows everything; 5xx, 429 and an
    unreachable host raise (``Retryable`` / ``Delay``) and are not cached. Thread-safe.
    """

    def __init__(
        self,
        *,
        allow_private: bool,
        timeout: float,
        user_agent: str = DEFAULT_USER_AGENT,
        ttl_seconds: float = 3600.0,
        allowed_networks: Sequence[str | Network] = (),
    ) -> None:
        self._guard = address_guard(allow_private, allowed_networks)
        self._timeout = timeout
        self._user_agent = user_agent
        self._ttl = ttl_seconds
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str, int], tuple[float, urllib.robotparser.RobotFileParser]]
        self._entries = {}

    def allowed(self, url: str) -> bool:
        """Whether robots.txt lets this crawler fetch ``url``."""
        normalized = _require_url(url)
        parser = self._parser(_origin(normalized))
        return parser.can_fetch(self._user_agent.split("/", 1)[0], normalized)

    def check(self, url: str) -> None:
        """Raise :class:`Disallowed` when robots.txt forbids ``url``."""
        if not self.allowed(url):
            raise Disallowed(url)

    def _parser(self, origin: tuple[str, str, int]) -> urllib.robotparser.RobotFileParser:
        now = time.monotonic()
        with self._lock:
            entry = self._entries.get(origin)
        if entry is not None and entry[0] > now:
            return entry[1]
        parser = self._fetch(origin)
        with self._lock:
            self._entries[origin] = (now + self._ttl, parser)
        return parser

    def _fetch(self, origin: tuple[str, str, int]) -> urllib.robotparser.RobotFileParser:
        scheme, host, port = origin
        url = _require_url(f"{scheme}://{host if ':' not in host else f'[{host}]'}:{port}/")
        robots_url = url + "robots.txt"
        parser = urllib.robotparser.RobotFileParser(robots_url)
        with _get_following(
            robots_url,
            self._guard,
            timeout=self._timeout,
            user_agent=self._user_agent,
            accept="*/*",
        ) as (_, response):
            if 400 <= response.status_code < 500 and response.status_code != 429:
                parser.parse([])
                return parser
            raise_for_status(response, f"GET {robots_url}")
            body = _read_body(
                response,
                f"GET {robots_url}",
                max_bytes=ROBOTS_MAX_BYTES,
                timeout=self._timeout,
                truncate=True,
            )
        parser.parse(body.decode("utf-8", errors="replace").splitlines())
        return parser


# -- the fetcher ---------------------------------------------------------------------------


def fetch_page(
    url: str,
    *,
    allow_private: bool,
    timeout: float,
    max_bytes: int = MAX_PAGE_BYTES,
    user_agent: str = DEFAULT_USER_AGENT,
    robots: RobotsCache | None = None,
    politeness: HostPoliteness | None = None,
    allowed_networks: Sequence[str | Network] = (),
) -> CrawledPage:
    """GET ``url`` and extract its title, markdown and same-host links.

    Parameters:
      allow_private: connect to private, loopback and link-local addresses too
        (``settings.crawl_allow_private_networks``; never in production).
      timeout: seconds to connect, between two reads, and for reading the whole body.
      max_bytes: a larger body (decoded) is ``Unrecoverable``.
      robots: when given, every hop must be allowed by its host's robots.txt.
      politeness: when given, the first request takes a slot of its host's window
        (redirect hops and robots.txt do not: they are few, and a redirect chain must not
        be delayed forever hop by hop).
      allowed_networks: private networks to allow even without ``allow_private``.

    Raises:
      Disallowed: robots.txt forbids the URL or a redirect target.
      Delay: the host's window is full, or a 429 with Retry-After.
      Retryable / Unrecoverable: as described in the module docstring.
    """
    current = _require_url(url)
    guard = address_guard(allow_private, allowed_networks)
    if robots is not None:
        robots.check(current)
    if politeness is not None:
        politeness.acquire(current)
    with _get_following(
        current, guard, timeout=timeout, user_agent=user_agent, accept=_ACCEPT, robots=robots
    ) as (final_url, response):
        what = f"GET {final_url}"
        raise_for_status(response, what)
        media_type = _media_type(response)
        if media_type not in HTML_TYPES | TEXT_TYPES:
            raise Unrecoverable(f"{what}: unsupported content type {media_type or '(none)'}")
        body = _read_body(response, what, max_bytes=max_bytes, timeout=timeout, truncate=False)
        charset = _charset(response)
        status = response.status_code
    if media_type in HTML_TYPES:
        title, markdown, links = extract_html(
            _decode(body, charset) if charset else body, final_url
        )
        return CrawledPage(final_url, title, markdown, links, status)
    text = _decode(body, charset)
    return CrawledPage(final_url, _text_title(text, media_type), text.strip(), [], status)


def page_fetcher(
    *,
    allow_private: bool,
    timeout: float,
    robots: RobotsCache | None = None,
    politeness: HostPoliteness | None = None,
    user_agent: str = DEFAULT_USER_AGENT,
) -> Callable[[str], CrawledPage]:
    """``fetch_page`` bound to one configuration: the ``fetch`` a crawl step takes."""
    return partial(
        fetch_page,
        allow_private=allow_private,
        timeout=timeout,
        robots=robots,
        politeness=politeness,
        user_agent=user_agent,
    )
