"""Fetch an RSS or Atom feed's bytes through the same SSRF guard, redirect rules and size
limit as a page (:mod:`.fetch`); the caller parses them (feedparser).

Failures speak the same hierarchy as :func:`~services.web.fetch.fetch_page`: 5xx, 429
without Retry-After, timeouts and transport errors are ``Retryable``; 429 with Retry-After
is a ``Delay``; a refused address, other 4xx, a body over the limit and too many redirects
are ``Unrecoverable``. The content type is not checked: feeds are served as
``application/rss+xml``, ``application/atom+xml``, ``application/xml``, ``text/xml`` and
often ``text/html``; the parser decides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from services.web.fetch import MAX_PAGE_BYTES
from services.web.pinned_get import DEFAULT_USER_AGENT
from services.web.redirects import get_following
from services.web.response_body import read_body
from services.web.urls import require_url
from shared.egress.addresses import Network, address_guard
from shared.http import raise_for_status

_ACCEPT = (
    "application/rss+xml,application/atom+xml;q=0.9,application/xml;q=0.8,text/xml;q=0.8,*/*;q=0.1"
)


@dataclass(frozen=True)
class FetchedFeed:
    """A feed's raw bytes, its URL after redirects and its declared content type."""

    final_url: str
    body: bytes
    content_type: str | None


#: A feed fetcher bound to its configuration (:func:`feed_fetcher`).
FeedFetch = Callable[[str], FetchedFeed]


def fetch_feed(
    url: str,
    *,
    allow_private: bool,
    timeout: float,
    max_bytes: int = MAX_PAGE_BYTES,
    user_agent: str = DEFAULT_USER_AGENT,
    allowed_networks: Sequence[str | Network] = (),
) -> FetchedFeed:
    """GET the feed at ``url``, every hop through the SSRF guard.

    Raises:
      Delay / Retryable / Unrecoverable: as described in the module docstring.
    """
    current = require_url(url)
    guard = address_guard(allow_private, allowed_networks)
    with get_following(current, guard, timeout=timeout, user_agent=user_agent, accept=_ACCEPT) as (
        final_url,
        response,
    ):
        what = f"GET {final_url}"
        raise_for_status(response, what)
        body = read_body(response, what, max_bytes=max_bytes, timeout=timeout, truncate=False)
        return FetchedFeed(final_url, body, response.headers.get("Content-Type"))


def feed_fetcher(
    *, allow_private: bool, timeout: float, allowed_networks: Sequence[str | Network] = ()
) -> FeedFetch:
    """``fetch_feed`` bound to one configuration."""
    return partial(
        fetch_feed, allow_private=allow_private, timeout=timeout, allowed_networks=allowed_networks
    )
