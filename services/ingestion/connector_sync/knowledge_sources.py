"""Notion, Confluence and Zendesk as knowledge-base connectors, on the knowledge sync's
clients (``services.connectors.notion``, ``.confluence``, ``.zendesk``).

======================  ===========================  ==========================  ===========
provider                listing (pages)              content                     removal
======================  ===========================  ==========================  ===========
Notion                  ``POST /v1/search``, one      ``GET /v1/pages/{id}`` and  proof: a
                        page of 100 per call          its blocks, as markdown     page search
                        (``next_cursor``), pages                                  no longer
                        under ``root_page_ids``                                   lists is
                                                                                  gone only
                                                                                  on 404 /
                                                                                  archived
                                                                                  (``GET
                                                                                  /v1/pages``)
Confluence              spaces, then their current    ``GET /wiki/api/v2/pages/   listing
                        pages (cursor links), in one  {id}`` storage format as
                        call                          markdown
Zendesk                 the resumable Help Center     carried by the listing      listing
                        listing (brands, locales,     (article bodies as
                        article lists), one page of   markdown)
                        100 articles per call
======================  ===========================  ==========================  ===========

Credentials: Notion ``api_token`` (an integration token or an OAuth access token);
Confluence ``email`` + ``api_token`` with the connection's ``site``; Zendesk ``email`` +
``api_token`` with the connection's ``subdomain``. Item ids: a Notion page id, a
Confluence page id, a Zendesk ``<article id>:<locale>``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from services.connectors import confluence, notion, zendesk
from services.connectors.base import FetchedDocument, SourceConfig
from services.ingestion.connector_sync.adapters import (
    MARKDOWN,
    ConnectorAccess,
    FetchedItem,
    ListedItem,
    ListedPage,
    StrictSettings,
)
from shared.inputs import Text

_Key = Field(min_length=1, max_length=4096)


class NotionCredentials(StrictSettings):
    api_token: Text = _Key


class EmailToken(StrictSettings):
    email: Text = Field(min_length=3, max_length=320)
    api_token: Text = _Key


class NoSettings(StrictSettings):
    pass


class ConfluenceConnection(StrictSettings):
    site: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$",
        description="The Atlassian site: `acme` or `acme.atlassian.net`.",
    )


class ZendeskConnection(StrictSettings):
    subdomain: str = Field(
        min_length=1,
        max_length=63,
        pattern=r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$",
        description="The account: `acme` for acme.zendesk.com.",
    )


class NotionSettings(StrictSettings):
    root_page_ids: list[Text] = Field(
        default_factory=list,
        max_length=100,
        description="Only pages under these pages or databases (none: every shared page).",
    )


class ConfluenceSettings(StrictSettings):
    space_keys: list[Text] = Field(
        default_factory=list, max_length=100, description="Only these spaces (none: all)."
    )


class ZendeskSettings(StrictSettings):
    locales: list[Text] = Field(
        default_factory=list,
        max_length=50,
        description="Each article in these locales (none: every published translation).",
    )
    brand_ids: list[Text] = Field(
        default_factory=list, max_length=100, description="Only these brands' help centers."
    )


def _config(access: ConnectorAccess, source_type: str) -> SourceConfig:
    return SourceConfig(
        source_id=access.binding_id,
        organization_id=access.organization_id,
        source_type=source_type,
        base_url=access.base_url,
        settings={**access.connection_settings, **access.settings, **access.credentials},
        timeout=access.timeout,
    )


def _item(document: FetchedDocument | None) -> FetchedItem | None:
    if document is None:
        return None
    return FetchedItem(
        title=document.title,
        body=document.content,
        media_type=MARKDOWN,
        url=document.url,
        modified_at=document.updated_at,
    )


class _KnowledgeSource(ABC):
    """What the three share: content fetched by the knowledge-sync client, no recorded
    quota (their 429/529 with Retry-After is a ``Delay`` raised by the call itself)."""

    incremental = False
    connection_model: Any = NoSettings
    source_type = ""

    @abstractmethod
    def _client(self) -> Any:
        """The knowledge-sync client module of this source (``notion``, ``confluence``...)."""

    def fetch(self, access: ConnectorAccess, external_id: str) -> FetchedItem | None:
        return _item(self._client().fetch_document(_config(access, self.source_type), external_id))

    def confirm_gone(self, access: ConnectorAccess, external_ids: Sequence[str]) -> frozenset[str]:
        return frozenset(i for i in external_ids if self.fetch(access, i) is None)

    def blocked_until(self, access: ConnectorAccess) -> datetime | None:
        return None


class NotionConnector(_KnowledgeSource):
    provider = "notion"
    source_type = "notion"
    removal: Literal["listing", "proof"] = "proof"
    credentials_model = NotionCredentials
    settings_model = NotionSettings
    item_pattern = r"^[0-9a-fA-F-]{32,36}$"
    item_help = "a Notion page id"
    _provider = notion.NotionProvider()

    def _client(self) -> Any:
        return self._provider

    def default_base_url(self, connection_settings: Mapping[str, Any]) -> str:
        return notion.DEFAULT_BASE_URL

    def list_page(
        self, access: ConnectorAccess, checkpoint: str | None, since: str | None
    ) -> ListedPage:
        documents, cursor = self._provider.search_page(_config(access, "notion"), checkpoint)
        items = [ListedItem(d.identifier, d.updated_at) for d in documents]
        return ListedPage(items, cursor)

    def confirm_gone(self, access: ConnectorAccess, external_ids: Sequence[str]) -> frozenset[str]:
        return self._provider.confirm_gone(_config(access, "notion"), external_ids)


class ConfluenceConnector(_KnowledgeSource):
    provider = "confluence"
    source_type = "confluence"
    removal: Literal["listing", "proof"] = "listing"
    credentials_model = EmailToken
    connection_model = ConfluenceConnection
    settings_model = ConfluenceSettings
    item_pattern = r"^[0-9]{1,20}$"
    item_help = "a Confluence page id"
    _provider = confluence.ConfluenceProvider()

    def _client(self) -> Any:
        return self._provider

    def default_base_url(self, connection_settings: Mapping[str, Any]) -> str:
        return confluence.default_base_url(connection_settings) or ""

    def list_page(
        self, access: ConnectorAccess, checkpoint: str | None, since: str | None
    ) -> ListedPage:
        listing = self._provider.list_source(_config(access, "confluence"))
        items = [ListedItem(d.identifier, d.updated_at) for d in listing.documents]
        return ListedPage(items, None, complete=listing.complete)


class ZendeskConnector(_KnowledgeSource):
    provider = "zendesk"
    source_type = "zendesk"
    removal: Literal["listing", "proof"] = "listing"
    credentials_model = EmailToken
    connection_model = ZendeskConnection
    settings_model = ZendeskSettings
    item_pattern = r"^[0-9]{1,20}:[A-Za-z]{2,3}(?:-[A-Za-z0-9]{2,8})*$"
    item_help = "`<article id>:<locale>`"
    _provider = zendesk.ZendeskProvider()

    def _client(self) -> Any:
        return self._provider

    def default_base_url(self, connection_settings: Mapping[str, Any]) -> str:
        return zendesk.base_url_for(connection_settings)

    def list_page(
        self, access: ConnectorAccess, checkpoint: str | None, since: str | None
    ) -> ListedPage:
        pages = self._provider.list_pages(_config(access, "zendesk"), checkpoint)
        close = getattr(pages, "close", None)  # a generator holds its help center's client
        try:
            first = next(pages, None)
        finally:
            if close is not None:
                close()
        if first is None:
            return ListedPage([], None)
        part, after = first
        items = [
            ListedItem(
                d.identifier,
                d.updated_at,
                content=FetchedItem(d.title, d.content or "", MARKDOWN, d.url, d.updated_at),
                stands_in=part.fills_gaps,
            )
            for d in part.documents
        ]
        return ListedPage(items, after or None, complete=part.complete)
