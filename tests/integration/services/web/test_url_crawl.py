"""The URL crawl fetcher against a real local website: extraction, robots.txt, redirects,
limits, the SSRF guard, status mapping and per-host politeness (real Redis)."""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import redis

from services.web.fetch import CrawledPage, fetch_page, page_fetcher
from services.web.politeness import HostPoliteness
from services.web.robots import MAX_CRAWL_DELAY_SECONDS, Disallowed, RobotsCache
from services.web.urls import normalize_url
from shared.egress.addresses import is_public_address
from shared.errors import Delay, Retryable, Unrecoverable
from shared.http import NotFound
from testkit.fakes.website import NAV_MARKER, SCRIPT_MARKER, STYLE_MARKER, FakeWebsite
from tiers.policies import WindowRule
from tiers.rate_window import RateWindows

LOCAL_ONLY = ["127.0.0.1/32"]  # the fake site's address, allowed while private ones are not


@pytest.fixture
def site() -> Iterator[FakeWebsite]:
    with FakeWebsite(pages=12, slow_seconds=1.5) as website:
        yield website


@pytest.fixture
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Host names the resolver answers with the given addresses (others resolve as usual).

    Only the guard resolves names: a request connects to the address the guard checked, so
    a name the system resolver does not know still works when the connection is pinned.
    """
    answers: dict[str, list[str]] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host in answers:
            return [
                (
                    socket.AF_INET6 if ":" in a else socket.AF_INET,
                    socket.SOCK_STREAM,
                    6,
                    "",
                    (a, port),
                )
                for a in answers[host]
            ]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers


def fetch(url: str, **kwargs: Any) -> CrawledPage:
    kwargs.setdefault("allow_private", True)
    kwargs.setdefault("timeout", 5.0)
    return fetch_page(url, **kwargs)


# -- extraction ----------------------------------------------------------------------------


def test_page_becomes_markdown_without_scripts_styles_or_navigation(site: FakeWebsite) -> None:
    page = fetch(site.url("/page/1"))

    assert page.status == 200
    assert page.final_url == site.url("/page/1")
    assert page.title == "Open Graph 1"  # og:title wins over <title>
    assert page.markdown.startswith("# Heading 1")
    assert "**bold**" in page.markdown
    assert f"[Child 3]({site.url('/page/3')})" in page.markdown  # links made absolute
    for marker in (SCRIPT_MARKER, STYLE_MARKER, NAV_MARKER, "site header", "footer text"):
        assert marker not in page.markdown
    assert "javascript:" not in page.markdown


def test_title_falls_back_to_the_title_element(site: FakeWebsite) -> None:
    assert fetch(site.url("/page/2")).title == "Page 2 | Fake site"


def test_links_are_same_host_absolute_normalised_and_deduplicated(site: FakeWebsite) -> None:
    page = fetch(site.url("/page/1"))

    assert page.links == [
        site.url("/page/0"),  # header and nav links count (fragment stripped, deduplicated)
        site.url("/page/10"),
        site.url("/page/10?ref=cross"),  # "../page/10?ref=cross#frag", resolved
        site.url("/page/3"),
        site.url("/page/4"),
        site.url("/private/secret-1"),  # robots.txt is checked when it is fetched
    ]  # no external host, mailto:, javascript:, rel=nofollow, nor the page itself


def test_normalisation_matches_the_request_validation() -> None:
    assert normalize_url("HTTP://Example.COM:80") == "http://example.com/"
    assert normalize_url("https://ex.com:443/a/../b?x=1#f") == "https://ex.com/b?x=1"
    assert normalize_url("/x", base="http://h.test:8080/a/b") == "http://h.test:8080/x"
    assert normalize_url("http://bücher.de/p") == "http://xn--bcher-kva.de/p"
    for unusable in ("mailto:a@b.c", "javascript:void(0)", "ftp://h/x", "http://u:p@h/", "#top"):
        assert normalize_url(unusable) is None


def test_plain_text_and_markdown_are_accepted(site: FakeWebsite) -> None:
    plain = fetch(site.url("/plain.txt"))
    markdown = fetch(site.url("/doc.md"))

    assert (plain.title, plain.markdown, plain.links) == (None, "Just text.\nSecond line.", [])
    assert markdown.title == "Markdown title"
    assert markdown.markdown == "# Markdown title\n\nSome *markdown*."


def test_other_content_types_are_refused(site: FakeWebsite) -> None:
    with pytest.raises(Unrecoverable, match="unsupported content type application/pdf"):
        fetch(site.url("/file.pdf"))


@pytest.mark.parametrize("path", ["/huge", "/huge-declared"])
def test_a_body_over_10_mb_is_unrecoverable(site: FakeWebsite, path: str) -> None:
    started = time.monotonic()

    with pytest.raises(Unrecoverable, match="content over 10 MB"):
        fetch(site.url(path))

    assert time.monotonic() - started < 10


# -- robots.txt ----------------------------------------------------------------------------


def test_robots_txt_is_honoured_and_cached(site: FakeWebsite) -> None:
    robots = RobotsCache(allow_private=True, timeout=5.0)

    with pytest.raises(Disallowed):
        fetch(site.url("/private/secret-1"), robots=robots)
    page = fetch(site.url("/page/3"), robots=robots)

    assert page.title == "Open Graph 3"
    assert site.requested("/private/") == []
    assert site.requested("/robots.txt") == ["/robots.txt"]


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/docs/a", True),  # Allow: /docs/ is longer than Disallow: /
        ("/docs/", True),
        ("/page/1", False),
        ("/docs/report.pdf", False),  # Disallow: /*.pdf$ (wildcard and end anchor)
        ("/docs/report.pdf?x=1", True),  # $ anchors the end: a query makes it another path
        ("/docs/private/x", False),  # the longest match wins, whatever the order
        ("/public/x", True),  # a more specific Allow after a broader Disallow
    ],
)
def test_robots_rules_follow_rfc_9309(path: str, allowed: bool) -> None:
    rules = (
        "User-agent: other\nAllow: /\n\n"
        "User-agent: *\n"
        "Disallow: /docs/private/\n"
        "Disallow: /\n"
        "Allow: /docs/\n"
        "Allow: /public/\n"
        "Disallow: /*.pdf$\n"
    )
    with FakeWebsite(robots=rules) as site:
        robots = RobotsCache(allow_private=True, timeout=5.0)
        assert robots.allowed(site.url(path)) is allowed


def test_the_crawlers_own_group_wins_over_the_star_group() -> None:
    rules = "User-agent: *\nDisallow: /\n\nUser-agent: speedtier-crawler\nAllow: /\nDisallow: /x\n"
    with FakeWebsite(robots=rules) as site:
        robots = RobotsCache(allow_private=True, timeout=5.0)
        assert robots.allowed(site.url("/page/1")) and not robots.allowed(site.url("/x/1"))


def test_a_group_of_a_shorter_product_token_does_not_apply_to_the_crawler() -> None:
    rules = "User-agent: *\nAllow: /\n\nUser-agent: speedtier\nDisallow: /\n"
    with FakeWebsite(robots=rules) as site:
        robots = RobotsCache(allow_private=True, timeout=5.0)
        assert robots.agent == "speedtier-crawler"
        assert robots.allowed(site.url("/page/1"))


def test_crawl_delay_is_a_lower_bound_on_the_host_window(
    fake_dns: dict[str, list[str]], redis_client: redis.Redis, namespace: str
) -> None:
    # Given a politeness of 100 requests a second and a host asking for 30 s between requests
    politeness = HostPoliteness(RateWindows(redis_client, namespace), WindowRule(100, 1.0))
    with FakeWebsite(robots="User-agent: *\nCrawl-delay: 30\n") as site:
        robots = RobotsCache(allow_private=True, timeout=5.0)
        fetcher = page_fetcher(
            allow_private=True, timeout=5.0, politeness=politeness, robots=robots
        )
        assert robots.crawl_delay(site.url("/page/1")) == 30.0
        first = fetcher(site.url("/page/1"))
        # Then the second request waits for the next 30 s window, not the next second
        with pytest.raises(Delay) as delayed:
            fetcher(site.url("/page/2"))
    assert first.status == 200
    assert delayed.value.reason == "host-politeness" and delayed.value.source == "pacing"
    assert time.time() < delayed.value.until <= time.time() + 30 * 1.1 + 1
    assert site.requested("/page/") == ["/page/1"]


def test_an_absurd_crawl_delay_is_capped() -> None:
    with FakeWebsite(robots="User-agent: *\nCrawl-delay: 86400\n") as site:
        robots = RobotsCache(allow_private=True, timeout=5.0)
        assert robots.crawl_delay(site.url("/")) == MAX_CRAWL_DELAY_SECONDS


def test_a_redirect_into_a_disallowed_path_is_disallowed(site: FakeWebsite) -> None:
    robots = RobotsCache(allow_private=True, timeout=5.0)

    with pytest.raises(Disallowed):
        fetch(site.url("/redirect-to?url=/private/x"), robots=robots)

    assert site.requested("/private/") == []


def test_a_missing_robots_txt_allows_everything() -> None:
    with FakeWebsite(robots_status=404) as site:
        robots = RobotsCache(allow_private=True, timeout=5.0)

        assert robots.allowed(site.url("/private/secret-1"))


def test_an_unavailable_robots_txt_is_retryable() -> None:
    with FakeWebsite(robots_status=503) as site:
        robots = RobotsCache(allow_private=True, timeout=5.0)

        with pytest.raises(Retryable):
            robots.allowed(site.url("/page/1"))
        with pytest.raises(Retryable):  # a failure is not cached: asked again
            robots.allowed(site.url("/page/1"))

        assert site.requested("/robots.txt") == ["/robots.txt", "/robots.txt"]


# -- redirects -----------------------------------------------------------------------------


def test_a_redirect_chain_is_followed(site: FakeWebsite) -> None:
    page = fetch(site.url("/redirect/4"))

    assert page.final_url == site.url("/page/1")
    assert site.requested("/redirect/") == [
        "/redirect/4",
        "/redirect/3",
        "/redirect/2",
        "/redirect/1",
    ]


def test_more_than_five_redirects_is_unrecoverable(site: FakeWebsite) -> None:
    with pytest.raises(Unrecoverable, match="more than 5 redirects"):
        fetch(site.url("/redirect-loop"))

    assert len(site.requested("/redirect-loop")) == 6


def test_a_redirect_to_another_host_connects_to_the_checked_address(
    site: FakeWebsite, fake_dns: dict[str, list[str]]
) -> None:
    # docs.test exists only in the guard's resolver: the request can only reach the site
    # through the pinned address.
    fake_dns["docs.test"] = ["127.0.0.1"]
    target = f"http://docs.test:{site.port}/page/2"

    page = fetch(site.url(f"/redirect-to?url={quote(target)}"))

    assert page.final_url == target
    assert f"http://docs.test:{site.port}/page/5" in page.links  # links of the final host


@pytest.mark.parametrize(
    "target",
    [
        "http://10.0.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:{port}/page/1",
        "http://[::ffff:10.0.0.1]/",
        "http://192.168.1.1/",
    ],
)
def test_a_redirect_to_a_private_address_is_refused(site: FakeWebsite, target: str) -> None:
    location = target.format(port=site.port)

    with pytest.raises(Unrecoverable, match="refused"):
        fetch(
            site.url(f"/redirect-to?url={quote(location)}"),
            allow_private=False,
            allowed_networks=LOCAL_ONLY,
        )


# -- the SSRF guard ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/page/1",
        "http://localhost:{port}/page/1",
        "http://[::1]:{port}/page/1",
        "http://[::ffff:127.0.0.1]:{port}/page/1",
        "http://0.0.0.0:{port}/page/1",
        "http://10.20.30.40/",
        "http://172.16.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fe80::1]/",
        "http://[fc00::1]/",
        "http://224.0.0.1/",
    ],
)
def test_private_addresses_are_refused_unless_allowed(site: FakeWebsite, url: str) -> None:
    with pytest.raises(Unrecoverable, match="refused"):
        fetch(url.format(port=site.port), allow_private=False)

    assert site.requests == []


def test_a_name_resolving_to_any_private_address_is_refused(
    site: FakeWebsite, fake_dns: dict[str, list[str]]
) -> None:
    fake_dns["mixed.test"] = ["93.184.216.34", "10.0.0.7"]  # refused before any connection

    with pytest.raises(Unrecoverable, match=r"10\.0\.0\.7"):
        fetch("http://mixed.test/", allow_private=False)


def test_the_public_address_rules() -> None:
    public = ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111"]
    private = [
        "127.0.0.1", "10.0.0.1", "172.31.255.255", "192.168.0.1", "169.254.169.254",
        "100.64.0.1", "0.0.0.0", "255.255.255.255", "224.0.0.251", "240.0.0.1", "::",
        "::1", "fe80::1", "fc00::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:169.254.1.1",
        "64:ff9b::a00:1", "2002:a00:1::",
    ]  # fmt: skip

    assert all(is_public_address(ipaddress.ip_address(a)) for a in public)
    assert not any(is_public_address(ipaddress.ip_address(a)) for a in private)


# -- statuses and transport ----------------------------------------------------------------


def test_statuses_map_to_the_error_hierarchy(site: FakeWebsite) -> None:
    with pytest.raises(NotFound):
        fetch(site.url("/missing"))
    with pytest.raises(Retryable, match="HTTP 500"):
        fetch(site.url("/error"))
    with pytest.raises(Retryable, match="no Retry-After"):
        fetch(site.url("/rate-limited-bare"))
    with pytest.raises(Delay) as delayed:
        fetch(site.url("/rate-limited"))

    assert delayed.value.reason == "retry-after"
    assert 25 < delayed.value.until - time.time() <= 30


def test_a_slow_page_times_out_as_retryable(site: FakeWebsite) -> None:
    started = time.monotonic()

    with pytest.raises(Retryable, match="Timeout"):
        fetch(site.url("/slow"), timeout=0.3)

    assert time.monotonic() - started < 1.5


def test_a_closed_port_is_retryable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    with pytest.raises(Retryable, match="cannot connect"):
        fetch(f"http://127.0.0.1:{port}/")


def test_non_http_urls_are_unrecoverable() -> None:
    with pytest.raises(Unrecoverable, match="not an http"):
        fetch("ftp://example.com/file")


# -- politeness ----------------------------------------------------------------------------


def test_politeness_delays_a_second_request_to_the_same_host(
    site: FakeWebsite,
    fake_dns: dict[str, list[str]],
    redis_client: redis.Redis,
    namespace: str,
) -> None:
    # One request per hour per host: the window cannot roll over during the test.
    politeness = HostPoliteness(RateWindows(redis_client, namespace), WindowRule(1, 3600.0))
    fetcher = page_fetcher(allow_private=True, timeout=5.0, politeness=politeness)
    fake_dns["docs.test"] = ["127.0.0.1"]

    first = fetcher(site.url("/page/1"))
    with pytest.raises(Delay) as delayed:
        fetcher(site.url("/page/2"))
    other_host = fetcher(f"http://docs.test:{site.port}/page/2")

    assert first.status == other_host.status == 200
    assert delayed.value.reason == "host-politeness"
    assert time.time() < delayed.value.until <= time.time() + 3600
    assert site.requested("/page/") == ["/page/1", "/page/2"]  # the delayed one never went out
