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

from services.connectors.base import ListedDocument, ListedSection, ListingPart
from shared.errors import Unrecoverable
from shared.http import JsonClient

Json = dict[str, Any]


def document_identifier(article_id: object, locale: str) -> str:
    """A translation's identifier, ``<article id>:<locale>``."""
    return f"{article_id}:{locale}"


def html_to_markdown(html: str | None) -> str:
    """Article body HTML as markdown (ATX headings, ``-`` bullets)."""
    from markdownify import markdownify  # bs4 with it: loaded by a process that converts

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


def article_lists(center: HelpCenter) -> list[str | None]:
    """The article lists a help center is read from, in order: one per locale
    (``/{locale}/articles``); with ``fallback``, the source-locale list (None) last."""
    lists: list[str | None] = list(center.locales)
    if center.fallback:
        lists.append(None)
    return lists


def locale_part(center: HelpCenter, locale: str | None, items: Sequence[Json]) -> ListingPart:
    """One page of an article list as listed documents: for a locale list, each published
    article in that locale; for the source-locale list (``locale`` None), each published
    article standing in for every requested locale (``fills_gaps``)."""
    documents: list[ListedDocument] = []
    for item in items:
        if item.get("draft") or "id" not in item:
            continue
        item_locale = str(item.get("locale") or "").lower()
        if locale is not None:
            if item_locale == locale:  # never another locale's text under this one
                documents.append(_document(item, locale))
            continue
        documents += [_document(item, wanted) for wanted in center.locales]
    return ListingPart(documents=documents, fills_gaps=locale is None)


def _document(item: Json, locale: str) -> ListedDocument:
    section_id = item.get("section_id")
    return ListedDocument(
        identifier=document_identifier(item["id"], locale),
        title=str(item.get("title") or ""),
        url=item.get("html_url"),
        locale=locale,
        updated_at=timestamp(item.get("updated_at")),
        content=html_to_markdown(item.get("body")),
        section_identifiers=(f"section:{section_id}:{locale}",) if section_id else (),
    )


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
