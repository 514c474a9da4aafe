"""The help centers the Zendesk fake (``testkit.fakes.zendesk_server``) serves: brands,
locales, categories, nested sections, articles and their translations (a draft is per
translation, as in Zendesk), and a sample help center that has one of each case."""

from __future__ import annotations

from dataclasses import dataclass, field


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
