"""The help centers the Zendesk fake (``testkit.fakes.zendesk_server``) serves: brands,
locales, categories, nested sections, articles and their translations (a draft is per
translation, as in Zendesk), a sample help center that has one of each case, and how the
API renders them (its JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Every item's ``updated_at``.
UPDATED_AT = "2026-09-01T10:00:00Z"


@dataclass
class Translation:
    locale: str
    title: str
    body: str
    draft: bool = False


@dataclass
class Article:
    """An article; whether it is a draft is said by each of its ``translations``."""

    id: int
    section_id: int
    source_locale: str
    translations: list[Translation]


@dataclass
class Category:
    id: int
    names: dict[str, str]
    position: int = 0


@dataclass
class Section:
    id: int
    category_id: int
    names: dict[str, str]
    parent_section_id: int | None = None
    position: int = 0


@dataclass
class HelpCenter:
    default_locale: str
    locales: list[str]
    categories: list[Category] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    articles: list[Article] = field(default_factory=list)


@dataclass
class Brand:
    id: int
    name: str
    subdomain: str
    help_center_state: str = "enabled"
    has_help_center: bool = True
    active: bool = True


def sample_help_center(extra_articles: int = 6) -> HelpCenter:
    """en-us (default), fr and de; three levels of sections under "Getting started"; a draft
    article (its only translation is a draft), a draft translation, an article written in
    French, and ``extra_articles`` plain English ones (ids from 104)."""
    articles = [
        Article(
            100,
            12,
            "en-us",
            [
                Translation(
                    "en-us",
                    "Enable two-factor",
                    '<h2>Steps</h2><p>Open <a href="https://acme.test/settings">settings</a>'
                    " and press <strong>Enable</strong>.</p><ul><li>Scan the code</li>"
                    "<li>Type the number</li></ul>",
                ),
                Translation(
                    "fr", "Activer la double authentification", "<p>Ouvrez les réglages.</p>"
                ),
            ],
        ),
        Article(
            101, 20, "en-us", [Translation("en-us", "Unreleased pricing", "<p>x</p>", draft=True)]
        ),
        Article(
            102,
            10,
            "en-us",
            [
                Translation("en-us", "Change your email", "<p>Go to your profile.</p>"),
                Translation("fr", "Changer votre e-mail", "<p>Brouillon</p>", draft=True),
            ],
        ),
        Article(103, 20, "fr", [Translation("fr", "Télécharger une facture", "<p>Cliquez.</p>")]),
    ]
    articles += [
        Article(n, 10, "en-us", [Translation("en-us", f"Article {n}", f"<p>Body {n}</p>")])
        for n in range(104, 104 + extra_articles)
    ]
    return HelpCenter(
        default_locale="en-us",
        locales=["en-us", "fr", "de"],
        categories=[
            Category(1, {"en-us": "Getting started", "fr": "Premiers pas"}, position=1),
            Category(2, {"en-us": "Billing"}, position=2),
        ],
        sections=[
            Section(12, 1, {"en-us": "Two-factor", "fr": "Double authentification"}, 11),
            Section(11, 1, {"en-us": "Passwords"}, 10),
            Section(10, 1, {"en-us": "Accounts", "fr": "Comptes"}),
            Section(20, 2, {"en-us": "Invoices", "fr": "Factures"}),
        ],
        articles=articles,
    )


def localized(center: HelpCenter, locale: str, kind: str) -> list[dict[str, Any]]:
    """A locale's list: only the items with a name (or translation) in that locale."""
    if kind == "articles":
        # Articles in that locale: the article's id, that translation's text and draft.
        return [
            article_json(a, t)
            for a in center.articles
            for t in a.translations
            if t.locale == locale
        ]
    items: list[Category] | list[Section] = (
        center.categories if kind == "categories" else center.sections
    )
    listed = []
    for item in items:
        if locale not in item.names:
            continue
        body: dict[str, Any] = {
            "id": item.id,
            "name": item.names[locale],
            "locale": locale,
            "source_locale": center.default_locale,
            "position": item.position,
            "html_url": f"https://help.acme.test/hc/{locale}/{kind}/{item.id}",
        }
        if isinstance(item, Section):
            body["category_id"] = item.category_id
            body["parent_section_id"] = item.parent_section_id
        listed.append(body)
    return listed


def article_json(article: Article, translation: Translation | None = None) -> dict[str, Any]:
    """The article in ``translation``'s locale (default: its source locale); its draft is
    that translation's."""
    shown = translation or next(
        t for t in article.translations if t.locale == article.source_locale
    )
    body = {**translation_json(article, shown), "id": article.id}
    body.pop("source_id")
    body.pop("source_type")
    return body


def translation_json(article: Article, translation: Translation) -> dict[str, Any]:
    """A translation as the translations endpoint answers it."""
    return {
        "id": article.id * 100 + article.translations.index(translation),
        "source_id": article.id,
        "source_type": "Article",
        "section_id": article.section_id,
        "source_locale": article.source_locale,
        "locale": translation.locale,
        "title": translation.title,
        "body": translation.body,
        "draft": translation.draft,
        "html_url": f"https://help.acme.test/hc/{translation.locale}/articles/{article.id}",
        "updated_at": UPDATED_AT,
    }
