"""URL crawl: the page fetcher a crawled URL goes through, configured from the settings.

The walk (the ledger of claimed URLs, depth and page caps, the crawl_url jobs) belongs to
the knowledge sync (seed 000), and a URL document's pages to ingestion (seed 003); how a
page is fetched belongs to the web kernel. This connector binds the two: the SSRF guard's
private-network switch (``crawl_allow_private_networks``) and allowed networks
(``egress_allowed_networks``), the HTTP timeout, robots.txt,
and, given the shared rate windows, the per-host politeness rule (``crawl_host_rate``).
"""

from __future__ import annotations

from services.web import politeness
from services.web.fetch import PageFetch, page_fetcher
from services.web.robots import RobotsCache
from shared.config import Settings, parse_rate
from tiers.policies import WindowRule
from tiers.rate_window import RateWindows


def url_fetcher(settings: Settings, *, windows: RateWindows | None = None) -> PageFetch:
    """The page fetcher of ``settings``: guarded, robots-checked, and polite per host when
    ``windows`` is given (a crawl); without it, no host window is taken (a URL document,
    whose pages are fetched one after another)."""
    allow_private = settings.crawl_allow_private_networks
    networks = settings.egress_networks
    timeout = settings.http_timeout_seconds
    host_window = None
    if windows is not None:
        rule = WindowRule(*parse_rate(settings.crawl_host_rate, field="crawl_host_rate"))
        # Looked up on the module at call time, so a process may swap the class before
        # bootstrap (the benchmarks scale the rule that way).
        host_window = politeness.HostPoliteness(windows, rule)
    return page_fetcher(
        allow_private=allow_private,
        timeout=timeout,
        robots=RobotsCache(allow_private=allow_private, timeout=timeout, allowed_networks=networks),
        allowed_networks=networks,
        politeness=host_window,
    )
