"""The Zendesk provider against a local server speaking the Help Center API."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from services.connectors.base import Listing, SourceConfig
from services.connectors.zendesk import ZendeskProvider, base_url_for
from shared.errors import Delay, Retryable, Unrecoverable
from shared.http import NotFound
from testkit.fakes.zendesk_help_center import (
    Article,
    Brand,
    Category,
    HelpCenter,
    Section,
    Translation,
    sample_help_center,
)
from testkit.fakes.zendesk_server import API_TOKEN, EMAIL, FakeZendesk, Kind

ARTICLES = "/api/v2/help_center/articles"
EN_ARTICLES = "/api/v2/help_center/en-us/articles"

#: Every failure of a listing page, and what the provider raises for it.
PAGE_FAILURES = [
    (Kind.SERVER_ERROR, Retryable),
    (Kind.RATE_LIMITED_BARE, Retryable),
    (Kind.TRUNCATED, Retryable),
    (Kind.INVALID_JSON, Retryable),
    (Kind.SLOW, Retryable),
    (Kind.RATE_LIMITED, Delay),
    (Kind.UNAUTHORIZED, Unrecoverable),
    (Kind.NOT_FOUND, NotFound),
]


@pytest.fixture
def zendesk() -> Iterator[FakeZendesk]:
    fake = FakeZendesk(sample_help_center(), slow_seconds=2.0)
    with fake:
        yield fake


def config(base_url: str, **settings: Any) -> SourceConfig:
    merged = {"subdomain": "acme", "email": EMAIL, "api_token": API_TOKEN, **settings}
    return SourceConfig(1, 7, "zendesk", base_url, merged, timeout=0.5)


def identifiers(listing: Listing) -> set[str]:
    return {d.identifier for d in listing.documents}


def paths(listing: Listing) -> dict[str, str]:
    """Each section's path, root first, by following parent identifiers."""
    by_id = {s.identifier: s for s in listing.sections}
    result = {}
    for section in listing.sections:
        names, current = [], section
        while True:
            names.append(current.name)
            if current.parent_identifier is None:
                break
            current = by_id[current.parent_identifier]
        result[section.identifier] = " > ".join(reversed(names))
    return result


class BrandRouting(ZendeskProvider):
    """Sends each brand to its own ``brand_url``, as on Zendesk's domain."""

    def brand_base_url(self, config: SourceConfig, brand: dict[str, Any]) -> str:
        return str(brand["brand_url"])


def small_help_center(article_id: int, title: str) -> HelpCenter:
    return HelpCenter(
        default_locale="en-us",
        locales=["en-us"],
        categories=[Category(5, {"en-us": "General"})],
        sections=[Section(50, 5, {"en-us": "FAQ"})],
        articles=[Article(article_id, 50, "en-us", [Translation("en-us", title, "<p>hi</p>")])],
    )


# -- brands ---------------------------------------------------------------------------------


def test_lists_enabled_help_centers_of_the_chosen_brands(zendesk: FakeZendesk) -> None:
    # Given a second enabled brand, a disabled one, and one outside brand_ids
    zendesk.add_brand(Brand(2, "Beta", "beta"), small_help_center(900, "Beta FAQ"))
    zendesk.add_brand(Brand(3, "Gamma", "gamma", help_center_state="disabled"))
    zendesk.add_brand(Brand(4, "Delta", "delta"), small_help_center(950, "Delta FAQ"))

    # When the source lists brands 1, 2 and 3
    listing = BrandRouting().list_source(config(zendesk.base_url, brand_ids=[1, "2", 3]))

    # Then brands 1 and 2 are listed and the others are never called
    assert {"100:en-us", "900:en-us"} <= identifiers(listing)
    assert "950:en-us" not in identifiers(listing)
    assert "section:50:en-us" in {s.identifier for s in listing.sections}
    assert not [r for r in zendesk.requests if r.startswith(("/brand/3/", "/brand/4/"))]
    assert listing.complete


def test_an_overridden_base_url_serves_every_brand_once(zendesk: FakeZendesk) -> None:
    zendesk.add_brand(Brand(2, "Beta", "beta"), small_help_center(900, "Beta FAQ"))

    listing = ZendeskProvider().list_source(config(zendesk.base_url))

    assert "900:en-us" not in identifiers(listing)
    assert len(zendesk.requested("/api/v2/help_center/locales")) == 1
    assert not [r for r in zendesk.requests if r.startswith("/brand/")]


def test_brand_urls_on_zendesk_are_trusted_only_on_zendesk() -> None:
    provider = ZendeskProvider()
    on_zendesk = config("", subdomain="acme")

    assert provider.brand_base_url(on_zendesk, {"brand_url": "https://beta.zendesk.com"}) == (
        "https://beta.zendesk.com"
    )
    assert provider.brand_base_url(
        on_zendesk, {"brand_url": "https://evil.test", "subdomain": "beta"}
    ) == ("https://beta.zendesk.com")
    assert provider.brand_base_url(config("http://127.0.0.1:9"), {"brand_url": "x"}) == (
        "http://127.0.0.1:9"
    )


@pytest.mark.parametrize(
    "subdomain", ["acme", "Acme", "acme.zendesk.com", "https://acme.zendesk.com/"]
)
def test_base_url_for_a_subdomain(subdomain: str) -> None:
    assert base_url_for({"subdomain": subdomain}) == "https://acme.zendesk.com"


@pytest.mark.parametrize("subdomain", [None, "", "evil.test/x", "a b", "acme.evil.test"])
def test_base_url_for_refuses_anything_but_a_subdomain(subdomain: str | None) -> None:
    with pytest.raises(Unrecoverable):
        base_url_for({"subdomain": subdomain})


# -- sections, locales, content ---------------------------------------------------------------


def test_sections_nest_under_categories_with_names_per_locale(zendesk: FakeZendesk) -> None:
    listing = ZendeskProvider().list_source(config(zendesk.base_url))
    found = paths(listing)

    assert found["section:12:en-us"] == "Getting started > Accounts > Passwords > Two-factor"
    # a missing translation takes the default locale's name
    assert found["section:12:fr"] == (
        "Premiers pas > Comptes > Passwords > Double authentification"
    )
    assert found["section:20:de"] == "Billing > Invoices"
    assert found["category:1:de"] == "Getting started"
    # parents come before their children, so a caller can insert in order
    order = [s.identifier for s in listing.sections]
    for section in listing.sections:
        if section.parent_identifier:
            assert order.index(section.parent_identifier) < order.index(section.identifier)
    assert {s.locale for s in listing.sections} == {"en-us", "fr", "de"}


def test_without_locale_setting_each_published_translation_is_listed(
    zendesk: FakeZendesk,
) -> None:
    listing = ZendeskProvider().list_source(config(zendesk.base_url))

    extra = {f"{n}:en-us" for n in range(104, 110)}
    assert identifiers(listing) == {"100:en-us", "100:fr", "102:en-us", "103:fr"} | extra
    document = next(d for d in listing.documents if d.identifier == "100:fr")
    assert document.title == "Activer la double authentification"
    assert document.locale == "fr"
    assert document.section_identifiers == ("section:12:fr",)
    assert document.url == "https://help.acme.test/hc/fr/articles/100"
    assert document.updated_at == datetime(2026, 9, 1, 10, tzinfo=UTC)


def test_requested_locales_fall_back_to_the_source_locale(zendesk: FakeZendesk) -> None:
    # "ja" is not a locale of the help center, so it is dropped
    listing = ZendeskProvider().list_source(config(zendesk.base_url, locales="en-US, de, ja"))
    by_id = {d.identifier: d for d in listing.documents}

    assert {"100:de", "102:de", "103:en-us", "103:de"} <= set(by_id)
    assert not [i for i in by_id if i.endswith((":fr", ":ja"))]
    assert by_id["100:de"].title == "Enable two-factor"
    assert by_id["100:de"].content == by_id["100:en-us"].content
    assert by_id["100:de"].locale == "de"
    assert by_id["100:de"].section_identifiers == ("section:12:de",)
    assert by_id["103:en-us"].title == "Télécharger une facture"
    assert {s.locale for s in listing.sections} == {"en-us", "de"}


def test_body_html_becomes_markdown(zendesk: FakeZendesk) -> None:
    listing = ZendeskProvider().list_source(config(zendesk.base_url))
    document = next(d for d in listing.documents if d.identifier == "100:en-us")

    assert document.content == (
        "## Steps\n\nOpen [settings](https://acme.test/settings) and press **Enable**.\n\n"
        "- Scan the code\n- Type the number"
    )


def test_draft_articles_and_draft_translations_are_skipped(zendesk: FakeZendesk) -> None:
    listing = ZendeskProvider().list_source(config(zendesk.base_url))

    assert not [i for i in identifiers(listing) if i.startswith("101:")]
    assert "102:fr" not in identifiers(listing)


def test_a_draft_in_one_locale_keeps_the_published_translations(zendesk: FakeZendesk) -> None:
    # Given an article whose English source is being rewritten (a draft) while its French and
    # German translations stay published: the article's own draft flag is true
    zendesk.help_centers[1].articles.append(
        Article(
            130,
            10,
            "en-us",
            [
                Translation("en-us", "Rewrite in progress", "<p>new</p>", draft=True),
                Translation("fr", "Publié", "<p>publié</p>"),
                Translation("de", "Veröffentlicht", "<p>veröffentlicht</p>"),
            ],
        )
    )
    assert (
        ZendeskProvider()
        ._client(config(zendesk.base_url), zendesk.base_url)
        .get(f"{ARTICLES}/130")["article"]["draft"]
    )

    listing = ZendeskProvider().list_source(config(zendesk.base_url))

    # Then the published translations are listed, the draft is not
    assert {"130:fr", "130:de"} <= identifiers(listing)
    assert "130:en-us" not in identifiers(listing)
    fetched = ZendeskProvider().fetch_document(config(zendesk.base_url), "130:fr")
    assert fetched is not None and fetched.title == "Publié"
    assert ZendeskProvider().fetch_document(config(zendesk.base_url), "130:en-us") is None


def test_a_restricted_help_center_is_read_with_the_credentials(zendesk: FakeZendesk) -> None:
    # Given a brand whose help center is restricted to signed-in users
    zendesk.add_brand(
        Brand(2, "Internal", "internal", help_center_state="restricted"),
        small_help_center(910, "Internal FAQ"),
    )

    listing = BrandRouting().list_source(config(zendesk.base_url))

    # Then its articles are listed, and the listing is complete
    assert "910:en-us" in identifiers(listing) and listing.complete
    document = BrandRouting().fetch_document(config(zendesk.base_url), "910:en-us")
    assert document is not None and document.title == "Internal FAQ"


# -- pagination -------------------------------------------------------------------------------


def test_cursor_pagination_walks_every_page() -> None:
    fake = FakeZendesk(sample_help_center(extra_articles=20), page_size=1)
    with fake:
        listing = ZendeskProvider().list_source(config(fake.base_url))
        pages = fake.requested(EN_ARTICLES)

    assert len(pages) == 23  # the 23 articles with an English translation, drafts included
    assert "page%5Bsize%5D=1" in pages[0] or "page[size]=1" in pages[0]
    assert all("page%5Bafter%5D" in page for page in pages[1:])
    assert {f"{n}:en-us" for n in range(104, 124)} <= identifiers(listing)
    assert not [r for r in fake.requests if "/translations" in r]


def test_offset_pagination_follows_next_page() -> None:
    fake = FakeZendesk(sample_help_center(extra_articles=10), page_size=2, cursor_pagination=False)
    with fake:
        listing = ZendeskProvider().list_source(config(fake.base_url))
        pages = fake.requested(EN_ARTICLES)

    assert len(pages) == 7  # 13 English articles, 2 a page
    assert "page=7" in pages[-1]
    assert {f"{n}:en-us" for n in range(104, 114)} <= identifiers(listing)


def test_brand_prefixed_pages_stay_on_their_brand(zendesk: FakeZendesk) -> None:
    beta = small_help_center(900, "Beta FAQ")
    beta.articles += [
        Article(n, 50, "en-us", [Translation("en-us", f"B{n}", "<p>b</p>")])
        for n in range(901, 908)
    ]
    zendesk.add_brand(Brand(2, "Beta", "beta"), beta)

    listing = BrandRouting().list_source(config(zendesk.base_url, brand_ids="2"))

    assert identifiers(listing) == {f"{n}:en-us" for n in range(900, 908)}
    assert len(zendesk.requested(f"/brand/2{EN_ARTICLES}")) == 3


# -- snapshot safety ----------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "raised"), PAGE_FAILURES)
@pytest.mark.parametrize("page", ["first", "later"])
def test_a_failed_article_page_raises(
    zendesk: FakeZendesk, kind: Kind, raised: type[Exception], page: str
) -> None:
    zendesk.fail_articles(kind, page=page)

    with pytest.raises(raised):
        ZendeskProvider().list_source(config(zendesk.base_url))

    assert len(zendesk.requested(EN_ARTICLES)) == (1 if page == "first" else 2)


def test_a_rate_limited_page_delays_until_retry_after(zendesk: FakeZendesk) -> None:
    zendesk.fail(EN_ARTICLES, Kind.RATE_LIMITED, page="later", retry_after=45)

    with pytest.raises(Delay) as caught:
        ZendeskProvider().list_source(config(zendesk.base_url))

    assert caught.value.until == pytest.approx(time.time() + 45, abs=5)


def test_a_failed_section_page_raises(zendesk: FakeZendesk) -> None:
    zendesk.fail("/api/v2/help_center/fr/sections", Kind.SERVER_ERROR)

    with pytest.raises(Retryable):
        ZendeskProvider().list_source(config(zendesk.base_url))


# -- request volume and resumption -------------------------------------------------------------


def test_a_big_help_center_costs_pages_not_a_request_per_article() -> None:
    # Given 250 articles in three locales, 100 a page
    center = sample_help_center(extra_articles=0)
    center.articles = [
        Article(
            n,
            10,
            "en-us",
            [Translation("en-us", f"A{n}", "<p>a</p>"), Translation("fr", f"F{n}", "<p>f</p>")],
        )
        for n in range(1000, 1250)
    ]
    fake = FakeZendesk(center, page_size=100)
    with fake:
        listing = ZendeskProvider().list_source(replace(config(fake.base_url), timeout=30.0))

    # Then every translation is listed from the locale lists: 3 + 3 pages, de empty
    assert len(identifiers(listing)) == 500 and listing.complete
    article_pages = [r for r in fake.requests if "/articles" in r]
    assert len(article_pages) == 7
    assert not [r for r in fake.requests if "/translations" in r]
    assert len(fake.requests) <= 20  # brands, locales, sections and categories included


def test_list_pages_resumes_from_its_checkpoint(zendesk: FakeZendesk) -> None:
    provider = ZendeskProvider(page_size=3)
    settings = config(zendesk.base_url)
    full = provider.list_source(settings)
    zendesk.fail(EN_ARTICLES, Kind.RATE_LIMITED, page=3, times=1, retry_after=1)

    # When a page is rate limited mid-listing
    seen: list[str] = []
    checkpoint = None
    with pytest.raises(Delay):
        for part, after in provider.list_pages(settings, None):
            seen += [d.identifier for d in part.documents]
            checkpoint = after
    asked = len(zendesk.requests)
    # Then resuming from the last checkpoint reads only what was left
    for part, _ in provider.list_pages(settings, checkpoint):
        seen += [d.identifier for d in part.documents]
    en_pages = [r for r in zendesk.requests[asked:] if r.startswith(EN_ARTICLES)]

    assert sorted(seen) == sorted(identifiers(full))
    assert len(en_pages) == 1  # page 3 (of 3) again, not pages 1 and 2
    assert not [r for r in zendesk.requests[asked:] if "/sections" in r]


def test_a_junk_checkpoint_starts_over(zendesk: FakeZendesk) -> None:
    provider = ZendeskProvider()
    parts = list(provider.list_pages(config(zendesk.base_url), "not json"))
    assert parts[0][0].sections  # the sections part comes first


def test_wrong_credentials_are_unrecoverable(zendesk: FakeZendesk) -> None:
    with pytest.raises(Unrecoverable, match="invalid credentials"):
        ZendeskProvider().list_source(config(zendesk.base_url, api_token="wrong"))

    assert zendesk.requests == ["/api/v2/brands?page%5Bsize%5D=100"]


def test_missing_credentials_are_unrecoverable(zendesk: FakeZendesk) -> None:
    with pytest.raises(Unrecoverable, match="email and api_token"):
        ZendeskProvider().list_source(config(zendesk.base_url, email=""))


# -- one document -------------------------------------------------------------------------------


def test_fetch_document_reads_one_translation(zendesk: FakeZendesk) -> None:
    document = ZendeskProvider().fetch_document(config(zendesk.base_url), "100:fr")

    assert document is not None
    assert document.title == "Activer la double authentification"
    assert document.content == "Ouvrez les réglages."
    assert document.url == "https://help.acme.test/hc/fr/articles/100"


def test_fetch_document_falls_back_only_for_requested_locales(zendesk: FakeZendesk) -> None:
    provider = ZendeskProvider()

    fallback = provider.fetch_document(config(zendesk.base_url, locales=["de"]), "100:de")

    assert fallback is not None and fallback.title == "Enable two-factor"
    assert provider.fetch_document(config(zendesk.base_url), "100:de") is None


@pytest.mark.parametrize("identifier", ["999:en-us", "101:en-us", "102:fr"])
def test_fetch_document_of_a_missing_or_draft_translation_is_none(
    zendesk: FakeZendesk, identifier: str
) -> None:
    assert ZendeskProvider().fetch_document(config(zendesk.base_url), identifier) is None


def test_fetch_document_finds_an_article_on_another_brand(zendesk: FakeZendesk) -> None:
    zendesk.add_brand(Brand(2, "Beta", "beta"), small_help_center(900, "Beta FAQ"))

    document = BrandRouting().fetch_document(config(zendesk.base_url), "900:en-us")

    assert document is not None and document.title == "Beta FAQ"


def test_fetch_document_failures_raise(zendesk: FakeZendesk) -> None:
    zendesk.fail(f"{ARTICLES}/100/translations/fr", Kind.SERVER_ERROR)

    with pytest.raises(Retryable):
        ZendeskProvider().fetch_document(config(zendesk.base_url), "100:fr")
    with pytest.raises(Unrecoverable, match="malformed"):
        ZendeskProvider().fetch_document(config(zendesk.base_url), "not-an-id")


# -- the fake against zenpy, the most used Python SDK for Zendesk ------------------------------


@pytest.fixture
def zenpy_env(zendesk: FakeZendesk, monkeypatch: pytest.MonkeyPatch) -> FakeZendesk:
    # zenpy's own switches for a server that is not {subdomain}.zendesk.com over https
    monkeypatch.setenv("ZENPY_FORCE_SCHEME", "http")
    monkeypatch.setenv("ZENPY_FORCE_NETLOC", zendesk.base_url.removeprefix("http://"))
    return zendesk


def test_zenpy_reads_the_fakes_help_center(zenpy_env: FakeZendesk) -> None:
    from zenpy import Zenpy

    client = Zenpy(subdomain="acme", email=EMAIL, token=API_TOKEN)

    articles = list(client.help_center.articles())  # cursor pages of 3, followed by zenpy
    assert [a.id for a in articles] == [100, 101, 102, 103, *range(104, 110)]
    assert [a.draft for a in articles[:3]] == [False, True, False]
    translations = list(client.help_center.articles.translations(100))
    assert [(t.locale, t.draft) for t in translations] == [("en-us", False), ("fr", False)]
    assert [(t.locale, t.draft) for t in client.help_center.articles.translations(102)] == [
        ("en-us", False),
        ("fr", True),
    ]
    assert [s.id for s in client.help_center.sections()] == [12, 11, 10, 20]
    assert [c.name for c in client.help_center.categories()] == ["Getting started", "Billing"]
    assert [b.name for b in client.brands()] == ["Acme"]
    assert any(r.startswith(f"{ARTICLES}.json") for r in zenpy_env.requests)


def test_zenpy_reads_the_fakes_failures(zenpy_env: FakeZendesk) -> None:
    from zenpy import Zenpy
    from zenpy.lib.exception import APIException, RecordNotFoundException

    with pytest.raises(APIException):
        list(Zenpy(subdomain="acme", email=EMAIL, token="wrong").help_center.articles())
    client = Zenpy(subdomain="acme", email=EMAIL, token=API_TOKEN)
    with pytest.raises(RecordNotFoundException):
        client.help_center.articles(id=999)
    zenpy_env.fail(ARTICLES, Kind.SERVER_ERROR, times=1)
    with pytest.raises(APIException):
        list(client.help_center.articles())
