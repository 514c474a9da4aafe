"""The Zendesk listing's paging: its resumable checkpoints and next-page links.

A checkpoint (``{"b": help center, "l": article list, "u": page URL}``) rides on a delayed
job's message, so a listing interrupted by a 429 resumes at the page it reached.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

Json = dict[str, Any]


def checkpoint(help_center: int, article_list: int, url: str | None = None) -> str:
    """Where a listing resumes: the help center, its article list, and the page URL."""
    return json.dumps({"b": help_center, "l": article_list, "u": url}, separators=(",", ":"))


def parse_checkpoint(resume: str | None) -> dict[str, Any]:
    """A checkpoint from :meth:`ZendeskProvider.list_pages`; the start for None or junk."""
    try:
        value = json.loads(resume) if resume else None
    except ValueError:
        value = None
    if (
        isinstance(value, dict)
        and isinstance(value.get("b"), int)
        and isinstance(value.get("l"), int)
        and (value.get("u") is None or isinstance(value.get("u"), str))
    ):
        return value
    return {"b": 0, "l": 0, "u": None}


def next_page(body: Json) -> str | None:
    """The next page's URL of a cursor (``meta.has_more``, ``links.next``) or an offset
    (``next_page``) answer; None on the last page."""
    meta = body.get("meta")
    if isinstance(meta, dict) and "has_more" in meta:
        links = body.get("links")
        following = links.get("next") if isinstance(links, dict) else None
        return str(following) if meta["has_more"] and following else None
    following = body.get("next_page")
    return str(following) if following else None


def same_origin(base_url: str, url: str) -> str:
    """A next-page URL re-rooted on the client's own scheme and host, so the credentials go
    only where the source is configured, whatever host the answer names."""
    base, target = urlsplit(base_url), urlsplit(url)
    query = f"?{target.query}" if target.query else ""
    return f"{base.scheme}://{base.netloc}{target.path}{query}"
