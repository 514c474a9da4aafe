"""Zendesk Help Center answers as listed documents and sections.

The rules (identifiers, the locale rule, section paths) are in :mod:`.zendesk`'s docstring;
this module turns one help center's articles, translations, categories and sections into
``ListedDocument`` and ``ListedSection`` values, without any request of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from markdownify import markdownify

from services.connectors.base import ListedDocument, ListedSection
from shared.errors import Unrecoverable
from shared.http import JsonClient

Json = dict[str, Any]


def document_identifier(article_id: object, locale: str) -> str:
    """A translation's identifier, ``<article id>:<locale>``."""
    return f"{article_id}:{locale}"


def html_to_markdown(html: str | None) -> str:
    """Article body HTML as markdown (ATX headings, ``-`` bullets)."""
    # The wrapper keeps bs4 from reading a body such as "page.html" as a file name.
    return markdownify(f"<div>{html or ''}</div>", heading_style="ATX", bullets="-").strip()


def timestamp(value: Any) -> datetime | None:
    """An ISO 8601 time from an answer; None when absent or malformed."""
    try:
        return datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None


@dataclass(frozen=True)
class HelpCenter:
    """One brand's help center as a run lists it."""

    client: JsonClient
    locales: tuple[str, ...]
    default_locale: str
    fallback: bool


def article_documents(
    center: HelpCenter, article: Json, translations: Sequence[Json]
) -> list[ListedDocument]:
    """The listed documents of one article: one per help-center locale with a published
    translation (or, with ``fallback``, the source locale's), under ``<id>:<locale>``."""
    published = {
        str(item.get("locale") or "").lower(): item
        for item in translations
        if not item.get("draft")
    }
    source_locale = str(article.get("source_locale") or article.get("locale") or "").lower()
    section_id = article.get("section_id")
    documents = []
    for locale in center.locales:
        translation = published.get(locale)
        if translation is None and center.fallback:
            translation = published.get(source_locale)
        if translation is None:
            continue
        documents.append(
            ListedDocument(
                identifier=document_identifier(article["id"], locale),
                title=str(translation.get("title") or ""),
                url=translation.get("html_url") or article.get("html_url"),
                locale=locale,
                updated_at=timestamp(translation.get("updated_at")),
                content=html_to_markdown(translation.get("body")),
                section_identifiers=(f"section:{section_id}:{locale}",) if section_id else (),
            )
        )
    return documents


def _localized(versions: Mapping[str, Json], locale: str, default_locale: str) -> Json:
    """The item in ``locale``, else in the default locale, else in any locale listed."""
    return versions.get(locale) or versions.get(default_locale) or next(iter(versions.values()))


def section_tree(
    categories: Mapping[str, Mapping[str, Json]],
    sections: Mapping[str, Mapping[str, Json]],
    locales: Sequence[str],
    default_locale: str,
) -> list[ListedSection]:
    """Categories then sections, parents before children, once per locale.

    A section's parent is its parent section, or its category at the top; a parent Zendesk did
    not list (a restricted one) leaves the section at the root rather than dangling.
    """
    parents: dict[str, str | None] = {}
    for section_id, versions in sections.items():
        item = next(iter(versions.values()))
        parent, category = item.get("parent_section_id"), item.get("category_id")
        if parent is not None and str(parent) in sections:
            parents[section_id] = f"section:{parent}"
        elif category is not None and str(category) in categories:
            parents[section_id] = f"category:{category}"
        else:
            parents[section_id] = None

    def depth(section_id: str) -> int:
        steps, seen = 0, {section_id}
        parent = parents.get(section_id)
        while parent is not None and parent.startswith("section:"):
            steps += 1
            parent_id = parent.removeprefix("section:")
            if parent_id in seen:
                raise Unrecoverable(f"zendesk: section {section_id} is its own ancestor")
            seen.add(parent_id)
            parent = parents.get(parent_id)
        return steps

    listed: list[ListedSection] = []
    for locale in locales:
        for category_id, versions in categories.items():
            item = _localized(versions, locale, default_locale)
            listed.append(_listed(f"category:{category_id}", item, None, locale))
        for section_id in sorted(sections, key=depth):
            item = _localized(sections[section_id], locale, default_locale)
            parent = parents[section_id]
            listed.append(
                _listed(
                    f"section:{section_id}", item, f"{parent}:{locale}" if parent else None, locale
                )
            )
    return listed


def _listed(key: str, item: Json, parent: str | None, locale: str) -> ListedSection:
    return ListedSection(
        identifier=f"{key}:{locale}",
        name=str(item.get("name") or ""),
        parent_identifier=parent,
        url=item.get("html_url"),
        locale=locale,
        position=int(item.get("position") or 0),
    )
