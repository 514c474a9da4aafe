"""URL documents: fetching their pages, and when to fetch them again.

:func:`fetch_url_source` turns a URL (and, with a crawl depth, the same-host pages it links
to) into the markdown a URL document stores as its source bytes, through the web kernel's
SSRF-guarded fetcher. Its failures are sorted the way a document shows them
(:func:`services.web.failures.fetch_or_fail`): terminal (``FetchFailed``: unreachable,
redirecting off-host, over 10 MB, unsupported, disallowed, or an address the guard refused,
``refused: address 10.0.0.1 is private``, also logged as a WARNING naming the organization)
or transient (``TransientFailure``, retried; on the last attempt it fails the document as
``unreachable or redirecting URL``).

:func:`refresh_interval_seconds` and :func:`next_refresh_time` are the freshness clock's
arithmetic: the base's refresh schedule when it has one (hourly, daily or weekly: a weekly
base is fetched weekly, not at the platform's daily recrawl), else the recrawl interval
(daily by default, hourly at the soonest), doubled per consecutive failure, capped at a
week.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from services.web.failures import FetchFailed, TransientFailure, fetch_or_fail
from services.web.fetch import CrawledPage, PageFetch
from shared.db.models.ingestion import MAX_SOURCE_BYTES

log = logging.getLogger(__name__)

#: The type of the source bytes a URL document stores (the crawler's markdown); a restored
#: version's text is stored the same way.
MARKDOWN_CONTENT_TYPE = "text/markdown; charset=utf-8"
#: Pages one URL document may gather by following same-host links (``crawl_depth`` > 0).
MAX_CRAWL_PAGES = 20

#: How often URL documents are re-fetched by default (daily), and the soonest allowed.
DEFAULT_RECRAWL_INTERVAL_SECONDS = 86_400.0
MIN_RECRAWL_INTERVAL_SECONDS = 3600.0
REFRESH_INTERVALS = {"hourly": 3600.0, "daily": 86_400.0, "weekly": 604_800.0}
#: The longest a failing source waits between refreshes, whatever its failure count.
MAX_REFRESH_BACKOFF_SECONDS = 7 * 86_400.0


def _page_text(page: CrawledPage) -> str:
    if page.title and not page.markdown.lstrip().startswith("# "):
        return f"# {page.title}\n\n{page.markdown}"
    return page.markdown


def fetch_url_source(
    url: str, crawl_depth: int, fetch: PageFetch, *, organization_id: int
) -> bytes:
    """The page at ``url`` (and same-host pages linked from it, ``crawl_depth`` links deep,
    at most :data:`MAX_CRAWL_PAGES`) as markdown, the way a URL document stores it, for
    ``organization_id`` (named in the log when the SSRF guard refuses an address).

    A linked page that fails is left out; only the first page decides the outcome.

    Raises:
      FetchFailed: the first page is unreachable (4xx, too many redirects), its address
        is refused, it redirects to another host, is over 10 MB, of an unsupported type or
        disallowed by robots.txt.
      TransientFailure: a failure a later attempt may not meet (5xx, connection, DNS).
      Delay: the host asked to wait (429 with Retry-After, or the politeness window).
    """
    first = fetch_or_fail(url, fetch, organization_id=organization_id, requested=url)
    parts = [_page_text(first)]
    size = len(parts[0].encode())
    seen = {url, first.final_url}
    frontier = [(link, 1) for link in first.links]
    while frontier and crawl_depth > 0 and len(parts) < MAX_CRAWL_PAGES:
        link, depth = frontier.pop(0)
        if link in seen or depth > crawl_depth:
            continue
        seen.add(link)
        try:
            page = fetch_or_fail(link, fetch, organization_id=organization_id, requested=url)
        except (FetchFailed, TransientFailure) as exc:
            log.info("crawl of %s: leaving out %s (%s)", url, link, exc)
            continue
        text = _page_text(page)
        if size + len(text.encode()) + 2 > MAX_SOURCE_BYTES:
            break
        parts.append(text)
        size += len(text.encode()) + 2
        seen.add(page.final_url)
        frontier.extend((child, depth + 1) for child in page.links)
    return "\n\n".join(parts).encode()


def refresh_interval_seconds(
    refresh_schedule: str | None, recrawl_interval_seconds: float
) -> float:
    """How often a URL document is re-fetched: its base's schedule when it has one (the
    schedule is the base's own policy and wins over the platform's recrawl interval either
    way), else the recrawl interval; never sooner than :data:`MIN_RECRAWL_INTERVAL_SECONDS`
    (seed 003's hourly floor, whatever the caller passes)."""
    scheduled = REFRESH_INTERVALS.get(refresh_schedule or "")
    interval = scheduled if scheduled else recrawl_interval_seconds
    return max(interval, MIN_RECRAWL_INTERVAL_SECONDS)


def next_refresh_time(now: datetime, interval_seconds: float, failures: int) -> datetime:
    """``now + interval * 2**failures``, the backoff capped at a week (never below the
    interval itself)."""
    backoff = interval_seconds * 2 ** min(failures, 20)
    delay = max(interval_seconds, min(backoff, MAX_REFRESH_BACKOFF_SECONDS))
    return now + timedelta(seconds=delay)
