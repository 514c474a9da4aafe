"""Confluence storage-format XHTML as markdown (``services.connectors.confluence``).

A module of its own so that bs4 and markdownify (about 6 MiB) are imported when a page is
first converted, not by every process that registers the connectors.
"""

from __future__ import annotations

from typing import Any

from bs4 import BeautifulSoup, Tag
from markdownify import ATX, MarkdownConverter

#: Panel macros rendered as a quote headed by their title (or their name).
PANEL_MACROS = frozenset({"info", "note", "tip", "warning", "panel", "error", "success"})
#: Macros that only make sense inside Confluence (navigation, generated content).
DROPPED_MACROS = frozenset({"toc", "children", "anchor", "pagetree", "recently-updated"})
#: Confluence elements (by name prefix) that only wrap content: their content stays.
UNWRAPPED = ("ac:rich-text-body", "ac:inline-comment-marker", "ac:layout", "ac:link-body")


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
