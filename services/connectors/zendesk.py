"""Zendesk Help Center: brands, categories and nested sections, articles and their translations.

`zendesk_listing.py` maps answers to listed documents and sections; `zendesk_pages.py` holds
the resumable listing's checkpoints and next-page links.

Settings (``SourceConfig.settings``):
  ``subdomain``, ``email``, ``api_token``: required; requests authenticate with basic auth
  ``{email}/token:{api_token}`` against ``https://{subdomain}.zendesk.com``.
  ``brand_ids``: optional; only these brands (a list, or a comma-separated string).
  ``locales``: optional; only these locales, each one listed for every article (see below).

A listing carries content, so ``fetches_documents`` is False. Identifiers:
  documents ``<article id>:<locale>``; categories ``category:<id>:<locale>``; sections
  ``section:<id>:<locale>``. Sections are listed once per locale so that a section's name and
  path are in the document's language; a section or category without a name in a locale takes
  the default locale's name. A document's ``section_identifiers`` names its own section only;
  the path above it follows ``ListedSection.parent_identifier`` (section > section > category).

Locale rule: without ``locales`` a document is listed for every published translation in one of
the help center's locales. With ``locales`` (kept to those the help center has), every
published article is listed in each of them; a locale without a published translation takes
the article's source-locale title and content, under its own identifier ``<id>:<locale>``.
Draft is per translation (an article's ``draft`` is its source-locale translation's): a draft
translation is never listed, and an article whose source translation is a draft still lists
its published translations.

Help centers: a brand is read when its help center is ``enabled`` or ``restricted`` (visible
to signed-in users only; the API answers the agent credentials the source carries). A
``disabled`` help center, an inactive brand or one without a help center is not read.

Request volume: no request per article. Articles are listed per locale in bulk,
``GET /api/v2/help_center/{locale}/articles`` (100 a page; each item is the article in that
locale, its ``draft`` that translation's), one list per help center locale; with
``locales`` the requested locales' lists come first and ``GET /api/v2/help_center/articles``
(each article in its source locale) last, standing in (``fills_gaps``) for every requested
locale without a published translation. Sideloaded translations (``include=translations``)
are not used: Zendesk's sideloads carry "only a subset of the resource's properties", and
the per-article translations endpoint costs one request an article. A help center of N
articles and L locales costs about ``(L + 1) * N / 100`` requests instead of ``N``.
(https://developer.zendesk.com/api-reference/help_center/help-center-api/articles/#list-articles,
https://developer.zendesk.com/documentation/developer-tools/working-with-data/sideloading-related-records/)

Resumable: :meth:`ZendeskProvider.list_pages` yields the listing page by page with a
checkpoint after each (help center, list, next page URL); the source sync commits the pages
read before a 429's ``Delay`` and resumes from the checkpoint, so a help center bigger than
the account's per-minute budget finishes (``services/knowledge_sync/resumable_sync.py``).

Snapshot safety: any failed page of brands, locales, categories, sections or articles raises,
so nothing is removed before the listing is whole.

Pagination: every list is requested with cursor pagination (``page[size]``, then
``links.next`` while ``meta.has_more``); an offset-style answer (``next_page``) is followed too.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from services.connectors.base import (
    FetchedDocument,
    ListedDocument,
    ListedSection,
    Listing,
    ListingPart,
    SourceConfig,
)
from services.connectors.zendesk_listing import (
    HelpCenter,
    Json,
    article_lists,
    html_to_markdown,
    locale_part,
    section_tree,
    timestamp,
)
from services.connectors.zendesk_pages import checkpoint, next_page, parse_checkpoint, same_origin
from shared.errors import Retryable, Unrecoverable
from shared.http import JsonClient, NotFound

#: Zendesk's largest page for help center lists.
PAGE_SIZE = 100
ZENDESK_DOMAIN = "zendesk.com"
#: ``help_center_state`` values whose content the source's agent credentials can read.
READABLE_HELP_CENTERS = frozenset({"enabled", "restricted"})
_SUBDOMAIN = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


def base_url_for(settings: Mapping[str, Any]) -> str:
    """The account's API root, ``https://{subdomain}.zendesk.com``.

    Raises:
      Unrecoverable: the subdomain is missing or is not a bare Zendesk subdomain (a value such
        as ``evil.test/`` must never receive the credentials).
    """
    raw = str(settings.get("subdomain") or "").strip().lower()
    subdomain = raw.removeprefix("https://").removesuffix("/").removesuffix("." + ZENDESK_DOMAIN)
    if not _SUBDOMAIN.match(subdomain):
        raise Unrecoverable(f"zendesk: invalid subdomain setting {raw!r}")
    return f"https://{subdomain}.{ZENDESK_DOMAIN}"


def is_zendesk_url(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host.endswith("." + ZENDESK_DOMAIN)


def parse_document_identifier(identifier: str) -> tuple[str, str]:
    """``"<article id>:<locale>"`` -> (article id, locale); Unrecoverable when malformed."""
    article_id, _, locale = identifier.partition(":")
    if not article_id.isdigit() or not locale:
        raise Unrecoverable(f"zendesk: malformed document identifier {identifier!r}")
    return article_id, locale.lower()


def _string_list(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    return [str(item).strip() for item in items if str(item).strip()]


class ZendeskProvider:
    """The Zendesk Help Center client (see the module docstring for the rules).

    Parameters:
      page_size: items asked for per page (Zendesk allows at most 100).
    """

    source_types: tuple[str, ...] = ("zendesk",)
    fetches_documents: bool = False

    def __init__(self, page_size: int = PAGE_SIZE) -> None:
        self.page_size = page_size

    # -- the SourceProvider interface -------------------------------------------------------

    def list_source(self, config: SourceConfig) -> Listing:
        """Every published translation and every category and section of the chosen brands,
        read in one go (:meth:`list_pages` is the same listing, resumable)."""
        documents: dict[str, ListedDocument] = {}
        sections: list[ListedSection] = []
        complete = True
        for part, _ in self.list_pages(config, None):
            sections += part.sections
            complete = complete and part.complete
            for document in part.documents:
                if part.fills_gaps:
                    documents.setdefault(document.identifier, document)
                else:
                    documents[document.identifier] = document
        return Listing(list(documents.values()), sections, complete=complete)

    def list_pages(
        self, config: SourceConfig, resume: str | None
    ) -> Iterator[tuple[ListingPart, str | None]]:
        """The listing page by page, resumable (see "Request volume" in the module
        docstring); the checkpoint is ``{"b": help center, "l": list, "u": next page}``."""
        start = parse_checkpoint(resume)
        bases = self._help_center_bases(config)
        for b, base in enumerate(bases):
            if b < start["b"]:
                continue
            center = self._open(config, base)
            try:
                if not center.locales:
                    continue
                lists = article_lists(center)
                first_list = start["l"] if b == start["b"] else 0
                if first_list == 0:
                    yield ListingPart(sections=self._list_sections(center)), checkpoint(b, 1)
                for index in range(max(first_list, 1), len(lists) + 1):
                    locale = lists[index - 1]
                    url = start["u"] if (b, index) == (start["b"], start["l"]) else None
                    for items, following in self._pages(center.client, locale, url):
                        part = locale_part(center, locale, items)
                        after = (
                            checkpoint(b, index, following)
                            if following
                            else checkpoint(b, index + 1)
                        )
                        yield part, after
            finally:
                center.client.close()

    def _pages(
        self, client: JsonClient, locale: str | None, url: str | None
    ) -> Iterator[tuple[list[Json], str | None]]:
        """One article list's pages from ``url`` (None: its first): ``/{locale}/articles``,
        or ``/articles`` (each article in its source locale) for ``locale`` None."""
        path = (
            f"/api/v2/help_center/{locale}/articles" if locale else "/api/v2/help_center/articles"
        )
        params: dict[str, Any] | None = {"page[size]": self.page_size} if url is None else None
        current = url or path
        seen: set[str] = set()
        while True:
            target = current if current.startswith("/") else same_origin(client.base_url, current)
            body = client.json("GET", target, params=params)
            items = body.get("articles") if isinstance(body, dict) else None
            if not isinstance(items, list):
                raise Retryable(f"zendesk: GET {current}: no 'articles' list in the answer")
            following = next_page(body)
            yield items, following
            if not following:
                return
            if following in seen:
                raise Retryable(f"zendesk: GET {path}: pagination repeats {following}")
            seen.add(following)
            current, params = following, None

    def fetch_document(self, config: SourceConfig, identifier: str) -> FetchedDocument | None:
        """One translation (or its source-locale fallback); None when Zendesk no longer has it
        published. The article is looked for on the account's host, then on each brand's."""
        article_id, locale = parse_document_identifier(identifier)
        requested = {item.lower() for item in _string_list(config.settings.get("locales"))}
        for base in self._document_bases(config):
            client = self._client(config, base)
            try:
                article = client.get(f"/api/v2/help_center/articles/{article_id}")["article"]
            except NotFound:
                continue
            else:
                return self._fetch_translation(client, article, locale, locale in requested)
            finally:
                client.close()
        return None

    # -- where to call ------------------------------------------------------------------

    def account_base_url(self, config: SourceConfig) -> str:
        """The configured override when there is one, else the subdomain's URL."""
        return (config.base_url or base_url_for(config.settings)).rstrip("/")

    def brand_base_url(self, config: SourceConfig, brand: Json) -> str:
        """Where a brand's help center answers.

        A brand's own ``brand_url`` when the account is on Zendesk's domain; with a configured
        override elsewhere (a proxy, a local server) every brand answers at the override.
        Override to route brands differently.
        """
        account = self.account_base_url(config)
        if not is_zendesk_url(account):
            return account
        brand_url = str(brand.get("brand_url") or "")
        if brand_url.startswith("https://") and is_zendesk_url(brand_url):
            return brand_url.rstrip("/")
        return base_url_for({"subdomain": brand.get("subdomain")})

    def _document_bases(self, config: SourceConfig) -> Iterator[str]:
        """The account's host, then (only if needed) each other help center's."""
        account = self.account_base_url(config)
        yield account
        yield from (base for base in self._help_center_bases(config) if base != account)

    def _help_center_bases(self, config: SourceConfig) -> list[str]:
        """Distinct base URLs of the enabled help centers among the chosen brands."""
        wanted = set(_string_list(config.settings.get("brand_ids")))
        client = self._client(config, self.account_base_url(config))
        try:
            brands = list(self._items(client, "/api/v2/brands", "brands"))
        finally:
            client.close()
        bases: list[str] = []
        for brand in brands:
            if wanted and str(brand.get("id")) not in wanted:
                continue
            if not brand.get("active", True) or not brand.get("has_help_center", True):
                continue
            if brand.get("help_center_state", "enabled") not in READABLE_HELP_CENTERS:
                continue
            base = self.brand_base_url(config, brand)
            if base not in bases:
                bases.append(base)
        return bases

    def _client(self, config: SourceConfig, base: str) -> JsonClient:
        email = str(config.settings.get("email") or "")
        token = str(config.settings.get("api_token") or "")
        if not email or not token:
            raise Unrecoverable("zendesk: settings need email and api_token")
        credentials = base64.b64encode(f"{email}/token:{token}".encode()).decode("ascii")
        return JsonClient(
            base,
            headers={"Authorization": f"Basic {credentials}", "Accept": "application/json"},
            timeout=config.timeout,
        )

    def _open(self, config: SourceConfig, base: str) -> HelpCenter:
        client = self._client(config, base)
        try:
            answer = client.get("/api/v2/help_center/locales")
            available = [str(item).lower() for item in answer.get("locales") or []]
            default = str(answer.get("default_locale") or (available or ["en-us"])[0]).lower()
        except BaseException:
            client.close()
            raise
        requested = [item.lower() for item in _string_list(config.settings.get("locales"))]
        if requested:
            locales = tuple(item for item in dict.fromkeys(requested) if item in available)
            return HelpCenter(client, locales, default, fallback=True)
        return HelpCenter(client, tuple(available), default, fallback=False)

    # -- pages --------------------------------------------------------------------------

    def _items(self, client: JsonClient, path: str, key: str) -> Iterator[Json]:
        """Every item of a paginated list; a failed or malformed page raises."""
        url: str = path
        params: dict[str, Any] | None = {"page[size]": self.page_size}
        seen: set[str] = set()
        while True:
            body = client.json("GET", url, params=params)
            items = body.get(key) if isinstance(body, dict) else None
            if not isinstance(items, list):
                raise Retryable(f"zendesk: GET {url}: no {key!r} list in the answer")
            yield from items
            next_url = next_page(body)
            if not next_url:
                return
            url, params = same_origin(client.base_url, next_url), None
            if url in seen:
                raise Retryable(f"zendesk: GET {path}: pagination repeats {url}")
            seen.add(url)

    def _fetch_translation(
        self, client: JsonClient, article: Json, locale: str, fallback: bool
    ) -> FetchedDocument | None:
        translation = _published_translation(client, article["id"], locale)
        source_locale = str(article.get("source_locale") or article.get("locale") or "").lower()
        if translation is None and fallback and source_locale != locale:
            translation = _published_translation(client, article["id"], source_locale)
        if translation is None:
            return None
        return FetchedDocument(
            title=str(translation.get("title") or ""),
            content=html_to_markdown(translation.get("body")),
            url=translation.get("html_url"),
            updated_at=timestamp(translation.get("updated_at")),
        )

    def _list_sections(self, center: HelpCenter) -> list[ListedSection]:
        names_in = dict.fromkeys((*center.locales, center.default_locale))
        categories: dict[str, dict[str, Json]] = {}
        sections: dict[str, dict[str, Json]] = {}
        for locale in names_in:
            for item in self._items(
                center.client, f"/api/v2/help_center/{locale}/categories", "categories"
            ):
                categories.setdefault(str(item["id"]), {})[locale] = item
            for item in self._items(
                center.client, f"/api/v2/help_center/{locale}/sections", "sections"
            ):
                sections.setdefault(str(item["id"]), {})[locale] = item
        return section_tree(categories, sections, center.locales, center.default_locale)


def _published_translation(client: JsonClient, article_id: object, locale: str) -> Json | None:
    try:
        answer = client.get(f"/api/v2/help_center/articles/{article_id}/translations/{locale}")
    except NotFound:
        return None
    translation = answer.get("translation") if isinstance(answer, dict) else None
    if not isinstance(translation, dict) or translation.get("draft"):
        return None
    return translation
