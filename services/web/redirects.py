"""Following redirects hop by hop, each hop through the SSRF guard (and robots.txt)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import requests

from services.web.pinned_get import pinned_get
from services.web.urls import normalize_url
from shared.egress.addresses import AddressGuard
from shared.errors import Unrecoverable

MAX_REDIRECTS = 5
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


@contextmanager
def get_following(
    url: str,
    guard: AddressGuard,
    *,
    timeout: float,
    user_agent: str,
    accept: str,
    check_hop: Callable[[str], None] | None = None,
) -> Iterator[tuple[str, requests.Response]]:
    """GET ``url``, following up to five redirects, each hop guarded.

    Yields ``(final URL, response)``.

    Parameters:
      check_hop: called with every URL before it is requested (``RobotsCache.check``),
        raising to refuse it.

    Raises:
      Unrecoverable: a redirect without a Location, to a non-http(s) URL, or more than
        :data:`MAX_REDIRECTS` of them.
      what ``check_hop`` and :func:`~services.web.pinned_get.pinned_get` raise.
    """
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        if check_hop is not None:
            check_hop(current)
        with pinned_get(
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
