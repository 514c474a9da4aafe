"""Confluence Cloud: spaces as sections, their current pages as documents (REST API v2).

Protocol (basic auth with ``email`` and an API token):

* spaces: ``GET /wiki/api/v2/spaces?status=current&limit=250`` (``keys=A,B`` when
  ``space_keys`` is set); pages: ``GET /wiki/api/v2/spaces/{id}/pages?status=current``.
  Both follow the relative ``_links.next`` URL (which carries the ``cursor``) until there is
  none. Each space is a section ``space:<id>``; each page a document listed in its space.
* document: ``GET /wiki/api/v2/pages/{id}?body-format=storage``; the storage-format XHTML is
  rewritten (Confluence macros and links into plain HTML) and converted by ``markdownify``.

Settings: ``email``, ``api_token``, optional ``space_keys`` (a list or a comma-separated
string) and ``site`` (``acme``, ``acme.atlassian.net`` or a URL) for the default base URL.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping
from contextlib import closing
from datetime import datetime
from typing import Any

from bs4 import BeautifulSoup, Tag
from markdownify import ATX, MarkdownConverter

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
#: Panel macros rendered as a quote headed by their title (or their name).
PANEL_MACROS = frozenset({"info", "note", "tip", "warning", "panel", "error", "success"})
#: Macros that only make sense inside Confluence (navigation, generated content).
DROPPED_MACROS = frozenset({"toc", "children", "anchor", "pagetree", "recently-updated"})
#: Confluence elements (by name prefix) that only wrap content: their content stays.
UNWRAPPED = ("ac:rich-text-body", "ac:inline-comment-marker", "ac:layout", "ac:link-body")


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


# -- storage format -----------------------------------------------------------------------


class _Converter(MarkdownConverter):
    """markdownify with ATX headings, ``-`` bullets and fenced code in the macro's language."""

    def __init__(self) -> None:
        super().__init__(
            heading_style=ATX,
            bullets="-",
            escape_underscores=False,
            code_language_callback=_code_language,
        )


def _code_language(element: Any) -> str | None:
    code = element.find("code") if isinstance(element, Tag) else None
    if not isinstance(code, Tag):
        return None
    for name in code.get_attribute_list("class"):
        if name and str(name).startswith("language-"):
            return str(name).removeprefix("language-")
    return None


def storage_to_markdown(xhtml: str, *, wiki: str = "", page_id: str = "") -> str:
    """Confluence storage-format XHTML as markdown.

    Code macros become fenced code in their language, panels quotes, ``ac:link`` its text,
    ``ac:image`` an image (attachments by their download URL), task lists checkboxes;
    other macros keep their rich-text body, if any.
    """
    soup = BeautifulSoup(xhtml, "html.parser")
    for macro in reversed(soup.find_all(["ac:structured-macro", "ac:macro"])):
        _rewrite_macro(soup, macro)
    for link in soup.find_all("ac:link"):
        link.replace_with(_link_text(link))
    for image in soup.find_all("ac:image"):
        image.replace_with(_image(soup, image, wiki, page_id))
    for task_list in soup.find_all("ac:task-list"):
        _rewrite_tasks(soup, task_list)
    for emoticon in soup.find_all("ac:emoticon"):
        emoticon.replace_with(str(emoticon.get("ac:emoji-fallback") or ""))
    for time in soup.find_all("time"):
        time.replace_with(str(time.get("datetime") or time.get_text()))
    for leftover in soup.find_all(lambda t: t.name.startswith(("ac:", "ri:"))):
        if leftover.name.startswith(UNWRAPPED):
            leftover.unwrap()
        else:
            leftover.decompose()
    return str(_Converter().convert_soup(soup)).strip() + "\n"


def _parameter(macro: Tag, name: str) -> str:
    for parameter in macro.find_all("ac:parameter", recursive=False):
        if parameter.get("ac:name") == name:
            return parameter.get_text().strip()
    return ""


def _rewrite_macro(soup: BeautifulSoup, macro: Tag) -> None:
    name = str(macro.get("ac:name") or "")
    plain = macro.find("ac:plain-text-body", recursive=False)
    rich = macro.find("ac:rich-text-body", recursive=False)
    if name in DROPPED_MACROS:
        macro.decompose()
    elif name in ("code", "noformat") or (plain is not None and rich is None):
        pre = soup.new_tag("pre")
        code = soup.new_tag("code")
        language = _parameter(macro, "language")
        if language:
            code["class"] = f"language-{language}"
        code.string = plain.get_text() if plain is not None else ""
        pre.append(code)
        macro.replace_with(pre)
    elif rich is None:
        macro.decompose()
    else:
        title = _parameter(macro, "title")
        wrapper = soup.new_tag("blockquote" if name in PANEL_MACROS else "div")
        if title or name in PANEL_MACROS:
            heading = soup.new_tag("p")
            strong = soup.new_tag("strong")
            strong.string = title or name.capitalize()
            heading.append(strong)
            wrapper.append(heading)
        for child in list(rich.contents):
            wrapper.append(child.extract())
        macro.replace_with(wrapper)


def _link_text(link: Tag) -> str:
    body = link.find(["ac:plain-text-link-body", "ac:link-body"])
    if body is not None and body.get_text().strip():
        return body.get_text()
    for target, attribute in (
        ("ri:page", "ri:content-title"),
        ("ri:blog-post", "ri:content-title"),
        ("ri:attachment", "ri:filename"),
        ("ri:space", "ri:space-key"),
    ):
        found = link.find(target)
        if isinstance(found, Tag) and found.get(attribute):
            return str(found[attribute])
    return str(link.get("ac:anchor") or "")


def _image(soup: BeautifulSoup, image: Tag, wiki: str, page_id: str) -> Tag | str:
    url = image.find("ri:url")
    attachment = image.find("ri:attachment")
    if isinstance(url, Tag) and url.get("ri:value"):
        src = str(url["ri:value"])
    elif isinstance(attachment, Tag) and attachment.get("ri:filename") and page_id:
        src = f"{wiki}/download/attachments/{page_id}/{attachment['ri:filename']}"
    else:
        return ""
    alt = image.get("ac:alt") or (attachment.get("ri:filename") if attachment else "") or ""
    return soup.new_tag("img", attrs={"src": src, "alt": str(alt)})


def _rewrite_tasks(soup: BeautifulSoup, task_list: Tag) -> None:
    items = soup.new_tag("ul")
    for task in task_list.find_all("ac:task", recursive=False):
        status = task.find("ac:task-status")
        body = task.find("ac:task-body")
        done = status is not None and status.get_text().strip() == "complete"
        item = soup.new_tag("li")
        item.string = ("[x] " if done else "[ ] ") + (body.get_text().strip() if body else "")
        items.append(item)
    task_list.replace_with(items)
