"""A website as a super source: the web kernel's guarded fetcher behind the node contract.

A root is a site's start URL; its indexable nodes are the same-host pages reachable from it,
breadth first, at most ``settings.max_pages`` (100) pages and ``settings.max_depth`` (3)
links deep. Each walk call fetches up to ``settings.pages_per_step`` (10) pages through
:func:`services.web.fetch.page_fetcher` (SSRF guard, robots.txt, size and type limits) and
carries the frontier in its checkpoint (bounded by ``max_pages``). A page robots.txt forbids,
or one that answers a 4xx or an unsupported type, is left out; a transient failure raises
(the step runs again from the same checkpoint). A page's text is its main content as
markdown. Pages carry no reliable modification date, so a page's synchronization date is the
time it was fetched (every walk re-indexes the site; it lives on the slow tier).

Node ids are normalised URLs: ``WebsiteRoot`` and ``WebsitePage``. Settings:
``urls`` (roots) and the limits above; the addresses a site may resolve to are the
process's egress guard's (``shared.egress``).
"""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from typing import Any

from services.connectors.nodes import Connection, Node, NodeRef, NodeSource, WalkPage
from services.web.fetch import CrawledPage, PageFetch, page_fetcher
from services.web.robots import Disallowed, RobotsCache
from services.web.urls import normalize_url
from shared.egress.addresses import AddressGuard, default_guard
from shared.errors import Unrecoverable
from shared.http import NotFound

ROOT = "WebsiteRoot"
PAGE = "WebsitePage"
MAX_PAGES = 100
MAX_DEPTH = 3
PAGES_PER_STEP = 10


class WebsiteSource:
    """Pages of the connection's websites."""

    source = "website"
    root_node_types: tuple[str, ...] = (ROOT,)
    indexable_node_types: tuple[str, ...] = (PAGE,)

    def list_roots(self, conn: Connection) -> list[NodeRef]:
        urls = (normalize_url(str(u)) for u in conn.settings.get("urls") or [])
        return [NodeRef(ROOT, url) for url in urls if url]

    def walk(
        self, conn: Connection, root: NodeRef, checkpoint: str | None, since: str | None = None
    ) -> WalkPage:
        start = normalize_url(root.node_id)
        if start is None:
            raise Unrecoverable(f"website: {root.node_id!r} is not an http(s) URL")
        queue, seen = _decode(checkpoint, start)
        fetch = _fetcher(conn)
        max_pages = int(conn.settings.get("max_pages") or MAX_PAGES)
        max_depth = int(conn.settings.get("max_depth") or MAX_DEPTH)
        refs: list[NodeRef] = []
        for _ in range(int(conn.settings.get("pages_per_step") or PAGES_PER_STEP)):
            if not queue:
                break
            url, depth = queue[0]
            page = _crawl(fetch, url, is_root=url == start)
            queue.pop(0)
            if page is None:
                continue
            if page.final_url != url:  # redirected: the page is known by where it ended
                if page.final_url in seen:
                    continue
                seen.append(page.final_url)
            refs.append(NodeRef(PAGE, page.final_url))
            if depth >= max_depth:
                continue
            for link in page.links:
                if len(seen) >= max_pages:
                    break
                if link not in seen:
                    seen.append(link)
                    queue.append((link, depth + 1))
        if not queue:
            return WalkPage(refs, None)
        return WalkPage(refs, json.dumps({"queue": queue, "seen": seen}))

    def fetch(self, conn: Connection, ref: NodeRef) -> Node | None:
        page = _crawl(_fetcher(conn), ref.node_id, is_root=False)
        if page is None:
            return None
        return Node(
            ref=ref,
            title=page.title or ref.node_id,
            text=page.markdown,
            url=page.final_url,
            synchronization_date=datetime.now(UTC),
        )


SOURCE: NodeSource = WebsiteSource()


def _fetcher(conn: Connection) -> PageFetch:
    """The page fetcher of the process's egress guard: which addresses a site may resolve to
    is the operator's to say (``egress_allowed_networks``), never a connection setting's."""
    guard = default_guard()
    robots = _robots(guard, conn.timeout)
    return page_fetcher(
        allow_private=guard.allow_private,
        allowed_networks=guard.allowed_networks,
        timeout=conn.timeout,
        robots=robots,
    )


@functools.lru_cache(maxsize=8)
def _robots(guard: AddressGuard, timeout: float) -> RobotsCache:
    """One robots.txt cache per process and configuration (thread-safe, an hour per host),
    so the index jobs of a site do not fetch its robots.txt once per page."""
    return RobotsCache(
        allow_private=guard.allow_private, allowed_networks=guard.allowed_networks, timeout=timeout
    )


def _crawl(fetch: PageFetch, url: str, *, is_root: bool) -> CrawledPage | None:
    """The page, or None when it is not to be indexed (gone, forbidden, not a page); the
    root's own failures raise, so a wrong root URL is seen."""
    try:
        return fetch(url)
    except Disallowed:
        if is_root:
            raise Unrecoverable(f"website: robots.txt forbids {url}") from None
        return None
    except NotFound:
        if is_root:
            raise
        return None
    except Unrecoverable:
        if is_root:
            raise
        return None


def _decode(checkpoint: str | None, start: str) -> tuple[list[tuple[str, int]], list[str]]:
    if checkpoint:
        try:
            raw: dict[str, Any] = json.loads(checkpoint)
            queue = [(str(url), int(depth)) for url, depth in raw["queue"]]
            return queue, [str(url) for url in raw["seen"]]
        except (ValueError, KeyError, TypeError):
            pass
    return [(start, 0)], [start]
