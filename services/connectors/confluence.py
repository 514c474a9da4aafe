"""Confluence Cloud: spaces as sections, their current pages as documents (REST API v2).

Protocol (basic auth with ``email`` and an API token):

* spaces: ``GET /wiki/api/v2/spaces?status=current&limit=250`` (``keys=A,B`` when
  ``space_keys`` is set); pages: ``GET /wiki/api/v2/spaces/{id}/pages?status=current``.
  Both follow the relative ``_links.next`` URL (which carries the ``cursor``) until there is
  none. Each space is a section ``space:<id>``; each page a document listed in its space.
* document: ``GET /wiki/api/v2/pages/{id}?body-format=storage``; the storage-format XHTML is
  rewritten (Confluence macros and links into plain HTML) and converted by ``markdownify``
  (``services.connectors.confluence_storage``, imported at the first page: bs4 and
  markdownify stay out of processes that never fetch one).

Settings: ``email``, ``api_token``, optional ``space_keys`` (a list or a comma-separated
string) and ``site`` (``acme``, ``acme.atlassian.net`` or a URL) for the default base URL.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping
from contextlib import closing
from datetime import datetime
from typing import Any

from services.connectors.base import (
    FetchedDocument,
    ListedDocument,
    ListedSection,
    Listing,
    SourceConfig,
)
from shared.errors import Unrecoverable
from shared.http import JsonClient, NotFound

#: ``site`` fills the placeholder (see :func:`default_base_url`).
DEFAULT_BASE_URL = "https://{site}.atlassian.net"
API = "/wiki/api/v2"
LIMIT = 250


def default_base_url(settings: Mapping[str, Any]) -> str | None:
    """``https://<site>.atlassian.net`` from ``settings["site"]``; None when it is unset."""
    site = str(settings.get("site") or "").strip().rstrip("/")
    if not site:
        return None
    if site.startswith(("http://", "https://")):
        return site.removesuffix("/wiki")
    return f"https://{site}" if "." in site else DEFAULT_BASE_URL.format(site=site)


class ConfluenceProvider:
    """Lists a Confluence site's spaces and pages and renders one page to markdown."""

    source_types: tuple[str, ...] = ("confluence",)
    fetches_documents: bool = True

    def list_source(self, config: SourceConfig) -> Listing:
        params: dict[str, Any] = {"status": "current", "limit": LIMIT}
        keys = _key_list(config.settings.get("space_keys"))
        if keys:
            params["keys"] = ",".join(keys)
        sections: list[ListedSection] = []
        documents: list[ListedDocument] = []
        with closing(_client(config)) as client:
            spaces = list(_paginate(client, f"{API}/spaces", params))
            for position, (space, wiki) in enumerate(spaces):
                section = f"space:{space['id']}"
                sections.append(
                    ListedSection(
                        identifier=section,
                        name=str(space.get("name") or space.get("key") or section),
                        url=_web_url(wiki, space),
                        position=position,
                    )
                )
                pages = _paginate(
                    client,
                    f"{API}/spaces/{space['id']}/pages",
                    {"status": "current", "limit": LIMIT},
                )
                documents.extend(
                    _listed(page, wiki, section)
                    for page, wiki in pages
                    if page.get("status", "current") == "current"
                )
        return Listing(documents=documents, sections=sections)

    def fetch_document(self, config: SourceConfig, identifier: str) -> FetchedDocument | None:
        with closing(_client(config)) as client:
            try:
                page = client.json(
                    "GET", f"{API}/pages/{identifier}", params={"body-format": "storage"}
                )
            except NotFound:
                return None
        if page.get("status", "current") != "current":
            return None
        wiki = _wiki_base(page, config.base_url)
        storage = ((page.get("body") or {}).get("storage") or {}).get("value") or ""
        from services.connectors.confluence_storage import storage_to_markdown

        return FetchedDocument(
            title=str(page.get("title") or "Untitled"),
            content=storage_to_markdown(storage, wiki=wiki, page_id=str(page.get("id", ""))),
            url=_web_url(wiki, page),
            updated_at=_timestamp(page),
        )


def _client(config: SourceConfig) -> JsonClient:
    email = config.settings.get("email")
    token = config.settings.get("api_token")
    if not email or not token:
        raise Unrecoverable(f"confluence source {config.source_id}: email and api_token needed")
    basic = base64.b64encode(f"{email}:{token}".encode()).decode()
    headers = {"Authorization": f"Basic {basic}", "Accept": "application/json"}
    return JsonClient(config.base_url, headers=headers, timeout=config.timeout)


def _paginate(
    client: JsonClient, path: str, params: Mapping[str, Any]
) -> Iterator[tuple[dict[str, Any], str]]:
    """Each result with its wiki base URL, following ``_links.next`` to the end."""
    body = client.get(path, **params)
    while True:
        wiki = _wiki_base(body, client.base_url)
        for result in body.get("results") or []:
            yield result, wiki
        following = (body.get("_links") or {}).get("next")
        if not following:
            return
        body = client.get(str(following))


def _listed(page: Mapping[str, Any], wiki: str, section: str) -> ListedDocument:
    return ListedDocument(
        identifier=str(page["id"]),
        title=str(page.get("title") or "Untitled"),
        url=_web_url(wiki, page),
        updated_at=_timestamp(page),
        section_identifiers=(section,),
    )


def _wiki_base(body: Mapping[str, Any], base_url: str) -> str:
    base = (body.get("_links") or {}).get("base")
    return str(base).rstrip("/") if base else base_url.rstrip("/") + "/wiki"


def _web_url(wiki: str, obj: Mapping[str, Any]) -> str | None:
    webui = (obj.get("_links") or {}).get("webui")
    return f"{wiki}{webui}" if webui else None


def _timestamp(obj: Mapping[str, Any]) -> datetime | None:
    value = (obj.get("version") or {}).get("createdAt") or obj.get("createdAt")
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def _key_list(value: Any) -> list[str]:
    if not value:
        return []
    items = value.split(",") if isinstance(value, str) else value
    return [str(item).strip() for item in items if str(item).strip()]
