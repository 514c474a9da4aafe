"""Which robots.txt group applies to the crawler, with the examples of RFC 9309
(https://www.rfc-editor.org/rfc/rfc9309, sections 2.2.1 and 5.1): the product token is
matched exactly and case-insensitively, groups of the same token are combined, ``*`` applies
when no group names the token."""

from __future__ import annotations

import pytest

from services.web.robots import parse_robots

# RFC 9309, section 5.1 ("Simple Example").
SIMPLE_EXAMPLE = """\
User-Agent: *
Disallow: *.gif$
Disallow: /example/
Allow: /publications/

User-Agent: foobot
Disallow:/
Allow:/example/page.html
Allow:/example/allowed.gif

User-Agent: barbot
User-Agent: bazbot
Disallow: /example/page.html

User-Agent: quxbot

EOF
"""


@pytest.mark.parametrize(
    ("token", "path", "allowed"),
    [
        # any crawler not named: no *.gif, nothing under /example/, /publications/ allowed
        ("otherbot", "/image.gif", False),
        ("otherbot", "/example/page.html", False),
        ("otherbot", "/publications/a", True),
        ("otherbot", "/index.html", True),
        # foobot: only /example/page.html and /example/allowed.gif
        ("foobot", "/example/page.html", True),
        ("foobot", "/example/allowed.gif", True),
        ("foobot", "/publications/a", False),
        ("foobot", "/index.html", False),
        # barbot and bazbot: everything but /example/page.html
        ("barbot", "/example/page.html", False),
        ("barbot", "/example/other.html", True),
        ("bazbot", "/example/page.html", False),
        ("bazbot", "/image.gif", True),
        # quxbot: an empty group allows everything
        ("quxbot", "/example/page.html", True),
        ("quxbot", "/image.gif", True),
        # a token that only starts like one of them is not that crawler
        ("foobot-news", "/index.html", True),
        ("foobot-news", "/image.gif", False),
    ],
)
def test_the_simple_example_of_rfc_9309(token: str, path: str, allowed: bool) -> None:
    rules = parse_robots(SIMPLE_EXAMPLE, token)

    assert rules.can_fetch(f"https://example.com{path}", token) is allowed


def test_groups_of_the_same_token_are_combined() -> None:
    # RFC 9309, section 2.2.1: the two ExampleBot groups are one group of three rules.
    text = (
        "user-agent: ExampleBot\ndisallow: /foo\ndisallow: /bar\n\n"
        "user-agent: ExampleBot\ndisallow: /baz\n"
    )
    rules = parse_robots(text, "ExampleBot")

    for path in ("/foo", "/bar", "/baz"):
        assert not rules.can_fetch(f"https://example.com{path}", "ExampleBot")
    assert rules.can_fetch("https://example.com/qux", "ExampleBot")


@pytest.mark.parametrize("written", ["speedtier-crawler", "SpeedTier-Crawler", "SPEEDTIER-CRAWLER"])
def test_the_product_token_matches_without_regard_to_case(written: str) -> None:
    text = f"User-agent: *\nDisallow: /\n\nUser-agent: {written}\nAllow: /\n"
    rules = parse_robots(text, "speedtier-crawler")

    assert rules.can_fetch("https://example.com/page", "speedtier-crawler")


@pytest.mark.parametrize(
    "other", ["speedtier", "speedtier-crawl", "speed*", "crawler", "speedtier-crawler2"]
)
def test_a_group_of_another_product_token_does_not_apply(other: str) -> None:
    text = f"User-agent: *\nAllow: /\n\nUser-agent: {other}\nDisallow: /\n"
    rules = parse_robots(text, "speedtier-crawler")

    assert rules.can_fetch("https://example.com/page", "speedtier-crawler")
