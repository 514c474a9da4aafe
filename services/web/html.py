"""HTML to what a knowledge base keeps of it: a title, markdown, and same-host links.

markdownify (and bs4 under it, about 6 MiB) is imported at the first conversion: the API,
the scheduler and workers that never convert a page do not load it.
"""

from __future__ import annotations

from selectolax.lexbor import LexborHTMLParser, LexborNode

from services.web.urls import normalize_url, origin, takeable

# Boilerplate dropped before conversion (links are collected before, from the whole page).
_BOILERPLATE = (
    "script, style, noscript, template, iframe, object, embed, svg, canvas, form, button, "
    "input, select, textarea, dialog, nav, aside, body > header, body > footer, [hidden], "
    '[aria-hidden="true"], [role="navigation"], [role="banner"], [role="contentinfo"], '
    '[role="search"], [role="complementary"]'
)


def _clean_text(text: str | None) -> str | None:
    cleaned = " ".join((text or "").split())
    return cleaned or None


def _title(tree: LexborHTMLParser) -> str | None:
    og = tree.css_first('meta[property="og:title"]')
    if og is not None and (title := _clean_text(og.attributes.get("content"))):
        return title
    node = tree.css_first("title")
    return _clean_text(node.text()) if node is not None else None


def _links(tree: LexborHTMLParser, base: str, page_url: str) -> list[str]:
    page_origin = origin(page_url)
    links: dict[str, None] = {}
    for anchor in tree.css("a[href]"):
        if "nofollow" in (anchor.attributes.get("rel") or "").lower().split():
            continue
        link = normalize_url(anchor.attributes.get("href") or "", base=base)
        if link is None or not takeable(link):
            continue
        if link != page_url and origin(link) == page_origin:
            links.setdefault(link)
    return list(links)


def _outermost(nodes: list[LexborNode]) -> list[LexborNode]:
    """Matches that are not inside another match: destroying one frees its descendants."""
    matched = {node.mem_id for node in nodes}
    outermost = []
    for node in nodes:
        parent = node.parent
        while parent is not None and parent.mem_id not in matched:
            parent = parent.parent
        if parent is None:
            outermost.append(node)
    return outermost


def _markdown(html: str) -> str:
    from markdownify import markdownify

    text = markdownify(html, heading_style="ATX", bullets="-", strip=["img"])
    lines = [line.rstrip() for line in text.splitlines()]
    paragraphs = "\n".join(lines).split("\n\n")
    return "\n\n".join(p.strip("\n") for p in paragraphs if p.strip()).strip()


def extract_html(html: str | bytes, page_url: str) -> tuple[str | None, str, list[str]]:
    """``(title, markdown, same-host links)`` of an HTML page at ``page_url``.

    Bytes are decoded the way a browser would (BOM, then ``<meta charset>``, else UTF-8).
    """
    tree = LexborHTMLParser(html, encoding=isinstance(html, bytes))
    base = page_url
    base_tag = tree.css_first("base[href]")
    if base_tag is not None:
        base = normalize_url(base_tag.attributes.get("href") or "", base=page_url) or page_url
    title = _title(tree)
    links = _links(tree, base, page_url)
    for node in _outermost(tree.css(_BOILERPLATE)):
        node.decompose()
    for anchor in tree.css("a[href]"):
        href = anchor.attributes.get("href") or ""
        absolute = normalize_url(href, base=base)
        if absolute is not None:
            anchor.attrs["href"] = absolute
        elif href.strip().lower().startswith("javascript:"):
            del anchor.attrs["href"]
    root = tree.css_first("main") or tree.css_first('[role="main"]') or tree.body
    html_text = (root.html or "") if root is not None else ""
    return title, _markdown(html_text), links


def text_title(text: str, media_type: str) -> str | None:
    """A markdown document's first ``# `` heading; None for plain text."""
    if media_type == "text/plain":
        return None
    for line in text.splitlines():
        if line.startswith("# "):
            return _clean_text(line[2:])
    return None
