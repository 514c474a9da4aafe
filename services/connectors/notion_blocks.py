"""Notion's JSON as markdown: blocks (with their fetched children), rich text, page titles.

:func:`render_blocks` renders a page's blocks: blank lines between blocks, consecutive items
of one list kept tight. :func:`render_block` renders one block through the renderer of its
type (:data:`_RENDERERS`); a type without one renders its text and children.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PAGE_URL = "https://www.notion.so/{id}"

Block = dict[str, Any]
#: Where a fetched block keeps its fetched children (Notion's own JSON has no such key).
CHILDREN = "_children"
#: Blocks whose children are documents of their own: linked, never inlined.
LINKED_TYPES = frozenset({"child_page", "child_database"})
#: List-like blocks by the list they continue: consecutive items of one list stay tight.
LIST_FAMILIES = {
    "bulleted_list_item": "bullet",
    "to_do": "bullet",
    "toggle": "bullet",
    "numbered_list_item": "ordered",
}


def notion_id(identifier: str) -> str:
    """Notion accepts ids with or without dashes; compare them without."""
    return identifier.strip().replace("-", "").lower()


def page_url(page_id: str) -> str:
    return PAGE_URL.format(id=notion_id(page_id))


def page_title(page: Mapping[str, Any]) -> str:
    """The text of the page's title property (whatever a database names it)."""
    for prop in (page.get("properties") or {}).values():
        if isinstance(prop, Mapping) and prop.get("type") == "title":
            title = plain_text(prop.get("title") or []).strip()
            if title:
                return title
    return "Untitled"


# -- blocks --------------------------------------------------------------------------------


def render_blocks(blocks: Sequence[Block]) -> str:
    """Blocks as markdown: blank lines between blocks, list items kept tight."""
    out: list[str] = []
    previous: str | None = None  # the list family of the previous rendered block
    number = 0
    for block in blocks:
        kind = block.get("type", "")
        number = number + 1 if kind == "numbered_list_item" else 0
        text = render_block(block, number)
        if not text:
            continue
        family = LIST_FAMILIES.get(kind)
        if out:
            out.append("\n" if family is not None and family == previous else "\n\n")
        out.append(text)
        previous = family
    return "".join(out)


@dataclass(frozen=True)
class _Rendering:
    """One block as its renderer sees it.

    Attributes:
      kind / data: the block's type and the object under that type's key.
      text: its rich text as markdown.
      inner: its children as markdown.
      number: its number in a numbered list.
    """

    block: Block
    kind: str
    data: Mapping[str, Any]
    text: str
    inner: str
    number: int


def render_block(block: Block, number: int = 1) -> str:
    """One block (with its fetched children) as markdown; "" for what has no text."""
    kind = block.get("type", "")
    data: Mapping[str, Any] = block.get(kind) or {}
    children: Sequence[Block] = block.get(CHILDREN) or []
    inner = render_blocks(children)
    if inner and children[0].get("type") not in LIST_FAMILIES:
        inner = "\n" + inner  # a paragraph under an item is its own paragraph, not a run-on
    text = rich_text(data.get("rich_text") or [])
    if kind.startswith("heading_") and kind[-1] in "123":
        return _join(f"{'#' * int(kind[-1])} {text}", inner)
    render = _RENDERERS.get(kind, _text_and_children)
    return render(_Rendering(block, kind, data, text, inner, number))


def _text_and_children(b: _Rendering) -> str:
    return _join(b.text, b.inner)


def _to_do(b: _Rendering) -> str:
    return _item("- [x] " if b.data.get("checked") else "- [ ] ", b.text, b.inner, width=2)


def _callout(b: _Rendering) -> str:
    icon = (b.data.get("icon") or {}).get("emoji")
    return _quote(_join(f"{icon} {b.text}" if icon else b.text, b.inner))


def _linked_page(b: _Rendering) -> str:
    return f"[{b.data.get('title') or 'Untitled'}]({page_url(b.block['id'])})"


def _bookmark(b: _Rendering) -> str:
    if not b.data.get("url"):
        return _text_and_children(b)
    label = plain_text(b.data.get("caption") or []) or b.data["url"]
    return f"[{label}]({b.data['url']})"


def _media(b: _Rendering) -> str:
    source = b.data.get(b.data.get("type") or "") or {}
    url = source.get("url") if isinstance(source, Mapping) else None
    if not url:
        return ""
    label = plain_text(b.data.get("caption") or []) or b.data.get("name") or b.kind
    return f"![{label}]({url})" if b.kind == "image" else f"[{label}]({url})"


_RENDERERS: dict[str, Callable[[_Rendering], str]] = {
    "bulleted_list_item": lambda b: _item("- ", b.text, b.inner),
    "numbered_list_item": lambda b: _item(f"{b.number}. ", b.text, b.inner),
    "to_do": _to_do,
    "toggle": lambda b: _item("- ", b.text, b.inner),
    "quote": lambda b: _quote(_join(b.text, b.inner)),
    "callout": _callout,
    "code": lambda b: _join(_fence(b.data), rich_text(b.data.get("caption") or [])),
    "divider": lambda b: "---",
    "table": lambda b: _table(b.block),
    **dict.fromkeys(LINKED_TYPES, _linked_page),
    "equation": lambda b: f"$$\n{b.data.get('expression', '')}\n$$",
    **dict.fromkeys(("image", "video", "file", "pdf", "audio"), _media),
    **dict.fromkeys(("bookmark", "embed", "link_preview"), _bookmark),
}


def _join(*parts: str) -> str:
    return "\n\n".join(part.strip("\n") for part in parts if part.strip("\n"))


def _item(marker: str, text: str, inner: str, width: int | None = None) -> str:
    """A list item whose continuation lines and children sit under its text."""
    body = f"{text}\n{inner}" if inner else text
    pad = " " * (len(marker) if width is None else width)
    lines = body.split("\n")
    return marker + "\n".join([lines[0], *[pad + line if line else "" for line in lines[1:]]])


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.split("\n"))


def _fence(data: Mapping[str, Any]) -> str:
    code = plain_text(data.get("rich_text") or [])
    language = str(data.get("language") or "")
    language = "" if language == "plain text" else language.replace(" ", "-")
    fence = "```"
    while fence in code:
        fence += "`"
    return f"{fence}{language}\n{code}\n{fence}"


def _table(block: Block) -> str:
    rows = [
        [_cell(cell) for cell in (row.get("table_row") or {}).get("cells") or []]
        for row in block.get(CHILDREN) or []
        if row.get("type") == "table_row"
    ]
    if not rows:
        return ""
    width = max(int((block.get("table") or {}).get("table_width") or 0), *map(len, rows))
    lines = [_row(row + [""] * (width - len(row))) for row in rows]
    lines.insert(1, _row(["---"] * width))
    return "\n".join(lines)


def _cell(cell: Sequence[Mapping[str, Any]]) -> str:
    return rich_text(cell).replace("|", "\\|").replace("\n", "<br>")


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


# -- rich text -----------------------------------------------------------------------------


def plain_text(items: Sequence[Mapping[str, Any]]) -> str:
    return "".join(str(item.get("plain_text") or _content(item)) for item in items)


def rich_text(items: Sequence[Mapping[str, Any]]) -> str:
    """Rich text with its annotations (bold, italic, strikethrough, code) and links."""
    return "".join(_span(item) for item in items)


def _content(item: Mapping[str, Any]) -> str:
    return str((item.get("text") or {}).get("content") or "")


def _span(item: Mapping[str, Any]) -> str:
    if item.get("type") == "equation":
        return f"${(item.get('equation') or {}).get('expression', '')}$"
    content = str(item.get("plain_text") or _content(item))
    core = content.strip()
    if not core:
        return content
    lead = content[: len(content) - len(content.lstrip())]
    trail = content[len(content.rstrip()) :]
    notes = item.get("annotations") or {}
    if notes.get("code"):
        tick = "``" if "`" in core else "`"
        core = f"{tick}{core}{tick}" if tick == "`" else f"{tick} {core} {tick}"
    if notes.get("strikethrough"):
        core = f"~~{core}~~"
    if notes.get("italic"):
        core = f"*{core}*"
    if notes.get("bold"):
        core = f"**{core}**"
    href = item.get("href") or ((item.get("text") or {}).get("link") or {}).get("url")
    if href:
        core = f"[{core}]({href})"
    return f"{lead}{core}{trail}"
