"""Fetch one web page, safely and politely, and extract it.

:func:`fetch_page` GETs a page and turns it into markdown plus the page's same-host links.
Every request, redirect hops and robots.txt included, goes through the same SSRF guard
(:mod:`shared.egress`): the host is resolved once, every address it resolves to must be
public (unless private networks are allowed), and the connection is made to the checked
address itself (:mod:`.pinned_get`), so a second DNS answer cannot point the request elsewhere (no
DNS rebinding between check and connect). The residual risks are a TLS server that is
reachable at the checked public address but proxies onward, which no client-side check can
see, and requests the page makes itself, which never happen here: nothing is rendered or
executed.

Failures speak the error hierarchy (:mod:`shared.http` semantics): 5xx, 429 without
Retry-After, timeouts and transport errors are ``Retryable``; 429 with Retry-After is a
``Delay``; a refused address (``AddressRefused``, with its own reason), other
4xx, an unsupported content type, a page over the size limit and too many redirects are
``Unrecoverable``. A URL robots.txt forbids raises
:class:`~services.web.robots.Disallowed`, which is not a job failure: the crawl finishes the
URL without content.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from services.web.html import extract_html, text_title
from services.web.pinned_get import DEFAULT_USER_AGENT
from services.web.politeness import HostPoliteness
from services.web.redirects import get_following
from services.web.response_body import charset_of, decode_text, media_type_of, read_body
from services.web.robots import RobotsCache
from services.web.urls import require_url
from shared.egress.addresses import Network, address_guard
from shared.errors import Unrecoverable
from shared.http import raise_for_status

MAX_PAGE_BYTES = 10 * 1024 * 1024

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/x-markdown"})
_ACCEPT = "text/html,application/xhtml+xml;q=0.9,text/plain;q=0.8,text/markdown;q=0.8"


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


#: A fetcher bound to its configuration (:func:`page_fetcher`): URL in, page out.
PageFetch = Callable[[str], CrawledPage]


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
        be delayed forever hop by hop); the host's robots.txt ``Crawl-delay`` is a lower
        bound on that window's interval.
      allowed_networks: private networks to allow even without ``allow_private``.

    Raises:
      Disallowed: robots.txt forbids the URL or a redirect target.
      Delay: the host's window is full, or a 429 with Retry-After.
      Retryable / Unrecoverable: as described in the module docstring.
    """
    current = require_url(url)
    guard = address_guard(allow_private, allowed_networks)
    if robots is not None:
        robots.check(current)
    if politeness is not None:
        crawl_delay = robots.crawl_delay(current) if robots is not None else None
        politeness.acquire(current, at_least_seconds=crawl_delay)
    check_hop = robots.check if robots is not None else None
    with get_following(
        current, guard, timeout=timeout, user_agent=user_agent, accept=_ACCEPT, check_hop=check_hop
    ) as (final_url, response):
        what = f"GET {final_url}"
        raise_for_status(response, what)
        media_type = media_type_of(response)
        if media_type not in HTML_TYPES | TEXT_TYPES:
            raise Unrecoverable(f"{what}: unsupported content type {media_type or '(none)'}")
        body = read_body(response, what, max_bytes=max_bytes, timeout=timeout, truncate=False)
        charset = charset_of(response)
        status = response.status_code
    if media_type in HTML_TYPES:
        title, markdown, links = extract_html(
            decode_text(body, charset) if charset else body, final_url
        )
        return CrawledPage(final_url, title, markdown, links, status)
    text = decode_text(body, charset)
    return CrawledPage(final_url, text_title(text, media_type), text.strip(), [], status)


def page_fetcher(
    *,
    allow_private: bool,
    timeout: float,
    robots: RobotsCache | None = None,
    politeness: HostPoliteness | None = None,
    user_agent: str = DEFAULT_USER_AGENT,
    allowed_networks: Sequence[str | Network] = (),
) -> PageFetch:
    """``fetch_page`` bound to one configuration: the ``fetch`` a crawl step takes."""
    return partial(
        fetch_page,
        allow_private=allow_private,
        timeout=timeout,
        robots=robots,
        politeness=politeness,
        user_agent=user_agent,
        allowed_networks=allowed_networks,
    )
