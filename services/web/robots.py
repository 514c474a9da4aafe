"""robots.txt per origin: fetched through the SSRF guard, kept a while, asked per URL.

Rules are read per RFC 9309 with Protego (a maintained parser): the group of the most
specific matching user agent, then the most specific (longest) matching rule, ``Allow``
winning a tie; ``*`` and ``$`` wildcards (``Disallow: /`` with ``Allow: /docs/`` allows
``/docs/a``). ``urllib.robotparser`` applied the first matching rule and read ``*`` and ``$``
literally.

A group applies when its ``User-agent`` equals the crawler's product token, compared without
regard to case (RFC 9309, section 2.2.1): ``User-agent: speedtier`` does not apply to
``speedtier-crawler``. Protego also applies a group whose name starts the token, so
:func:`parse_robots` renames every group of another product token before Protego reads the
file; groups naming the same token are combined, and ``*`` applies when none names it.

``Crawl-delay`` (and ``Request-rate``) become a lower bound on the per-host politeness
(:meth:`RobotsCache.crawl_delay`, used by ``services.web.fetch``), capped at
:data:`MAX_CRAWL_DELAY_SECONDS`.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence

from protego import Protego

from services.web.pinned_get import DEFAULT_USER_AGENT
from services.web.redirects import get_following
from services.web.response_body import read_body
from services.web.urls import origin, require_url
from shared.egress.addresses import Network, address_guard
from shared.errors import SpeedtierError
from shared.http import raise_for_status

ROBOTS_MAX_BYTES = 500 * 1024  # RFC 9309: parse at least the first 500 KiB
#: A longer Crawl-delay is read as this: a site asking for hours between requests would
#: keep one crawl alive for weeks.
MAX_CRAWL_DELAY_SECONDS = 60.0

# A user-agent line in the forms Protego reads ("User-agent: x", "useragent x", "user agent: x").
_USER_AGENT_LINE = re.compile(r"(?im)^([ \t]*user[- ]?agent(?:[ \t]*:[ \t]*|[ \t]+))([^#\s]+)")
# The name other groups get: no product token can contain "~" (RFC 9309: letters, "_", "-").
_OTHER_AGENT = "~"


def parse_robots(text: str, product_token: str) -> Protego:
    """The rules of robots.txt ``text`` as they apply to ``product_token``: only groups whose
    user agent equals the token (case-insensitive) or ``*`` can match it."""
    token = product_token.lower()

    def rename(match: re.Match[str]) -> str:
        agent = match.group(2)
        kept = agent == "*" or agent.lower() == token
        return match.group(1) + (agent if kept else _OTHER_AGENT)

    return Protego.parse(_USER_AGENT_LINE.sub(rename, text))


class Disallowed(SpeedtierError):
    """robots.txt forbids the URL: finish it without content; this is not a job failure."""

    def __init__(self, url: str) -> None:
        super().__init__(f"{url}: disallowed by robots.txt")
        self.url = url


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
        self._entries: dict[tuple[str, str, int], tuple[float, Protego]] = {}

    @property
    def agent(self) -> str:
        """The product token robots.txt groups are matched against (``speedtier-crawler``)."""
        return self._user_agent.split("/", 1)[0]

    def allowed(self, url: str) -> bool:
        """Whether robots.txt lets this crawler fetch ``url``."""
        normalized = require_url(url)
        parser = self._parser(origin(normalized))
        return bool(parser.can_fetch(normalized, self.agent))

    def crawl_delay(self, url: str) -> float | None:
        """The seconds robots.txt asks between two requests to ``url``'s host (its
        ``Crawl-delay``, or the interval of its ``Request-rate``), at most
        :data:`MAX_CRAWL_DELAY_SECONDS`; None when it asks nothing."""
        parser = self._parser(origin(require_url(url)))
        delays: list[float] = []
        delay = parser.crawl_delay(self.agent)
        if delay:
            delays.append(float(delay))
        rate = parser.request_rate(self.agent)
        if rate is not None and rate.requests:
            delays.append(float(rate.seconds) / float(rate.requests))
        wanted = max(delays, default=0.0)
        return min(wanted, MAX_CRAWL_DELAY_SECONDS) if wanted > 0 else None

    def check(self, url: str) -> None:
        """Raise :class:`Disallowed` when robots.txt forbids ``url``."""
        if not self.allowed(url):
            raise Disallowed(url)

    def _parser(self, site: tuple[str, str, int]) -> Protego:
        now = time.monotonic()
        with self._lock:
            entry = self._entries.get(site)
        if entry is not None and entry[0] > now:
            return entry[1]
        parser = self._fetch(site)
        with self._lock:
            self._entries[site] = (now + self._ttl, parser)
        return parser

    def _fetch(self, site: tuple[str, str, int]) -> Protego:
        scheme, host, port = site
        url = require_url(f"{scheme}://{host if ':' not in host else f'[{host}]'}:{port}/")
        robots_url = url + "robots.txt"
        with get_following(
            robots_url,
            self._guard,
            timeout=self._timeout,
            user_agent=self._user_agent,
            accept="*/*",
        ) as (_, response):
            if 400 <= response.status_code < 500 and response.status_code != 429:
                return Protego.parse("")
            raise_for_status(response, f"GET {robots_url}")
            body = read_body(
                response,
                f"GET {robots_url}",
                max_bytes=ROBOTS_MAX_BYTES,
                timeout=self._timeout,
                truncate=True,
            )
        return parse_robots(body.decode("utf-8", errors="replace"), self.agent)
