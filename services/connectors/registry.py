"""Source type -> provider client, and where each provider answers by default."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from services.connectors import confluence, notion, scribe, zendesk
from services.connectors.base import SourceProvider

#: The clients of the providers whose sources sync through listings. URL sources sync by
#: crawling (see ``url_crawl`` and the knowledge sync's ``crawl_units.py``), Intercom sources
#: are not synced here.
PROVIDERS: dict[str, SourceProvider] = {
    "notion": notion.NotionProvider(),
    "zendesk": zendesk.ZendeskProvider(),
    "confluence": confluence.ConfluenceProvider(),
    "scribe": scribe.ScribeProvider(),
}

_DEFAULT_URLS: dict[str, Callable[[Mapping[str, Any]], str | None]] = {
    "notion": notion.default_base_url,
    "zendesk": zendesk.base_url_for,
    "confluence": confluence.default_base_url,
    "scribe": scribe.default_base_url,
}


def default_base_url(source_type: str, settings: Mapping[str, Any]) -> str:
    """The provider's production base URL for a source's settings ('' when unknown)."""
    resolve = _DEFAULT_URLS.get(source_type)
    return (resolve(settings) if resolve else None) or ""
