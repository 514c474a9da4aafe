"""What a connector sync needs from a provider, whatever its API: one contract over the
kernel clients (``services.connectors``), one adapter module per provider.

==============================  ==========================================================
call                            contract
==============================  ==========================================================
``list_page(access, cp,         one page of the binding's items from checkpoint ``cp``
since)``                        (None: the start); the page's ``checkpoint`` resumes after
                                it (None: the listing is finished, and ``watermark`` is
                                where an incremental pass may start, passed as ``since``)
``fetch(access, external_id)``  the item's content now; None when the provider says it is
                                gone (404, trashed, deleted, archived): proof of removal
``confirm_gone(access, ids)``   for providers whose listing is not a complete enumeration
                                (``removal = "proof"``): which of ``ids`` are gone
``blocked_until(access)``       when the connection may call again (a quota the kernel
                                recorded from the provider's headers); None: now
==============================  ==========================================================

``removal`` says how a sync may remove an item it no longer sees: ``listing`` (a full pass
whose every page was complete lists everything, so what it did not list is gone) or
``proof`` (only a per-item answer counts). ``incremental`` says the provider has a change
feed (Drive's changes API, Graph's delta): an incremental pass lists only what changed, and
removals come through it as items whose ``fetch`` answers None.

Errors are the shared hierarchy, as the kernel clients raise them: ``Delay`` (429 or 529
with Retry-After, a 403 rate limit), ``Retryable`` (5xx, timeouts, truncated pages),
``Unrecoverable`` (401/403, bad settings).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from services.connectors.nodes import RateLimitState

#: The media types a landed item's body may have (ingestion extracts each).
PLAIN = "text/plain; charset=utf-8"
MARKDOWN = "text/markdown; charset=utf-8"
HTML = "text/html; charset=utf-8"


class StrictSettings(BaseModel):
    """Settings a caller sends: strict types, no unknown fields."""

    model_config = ConfigDict(strict=True, extra="forbid")


@dataclass(frozen=True)
class ConnectorAccess:
    """One binding's way to its provider: the connection's credentials (decrypted, kept out
    of ``repr``), the connection's and the binding's settings, where the API answers."""

    provider: str
    organization_id: int
    connection_id: int
    binding_id: int
    base_url: str
    credentials: Mapping[str, str] = field(repr=False)
    connection_settings: Mapping[str, Any] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    timeout: float = 30.0
    rate_limits: RateLimitState | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class FetchedItem:
    """An item's content, as the document's source: ``body`` in ``media_type``."""

    title: str
    body: str
    media_type: str = PLAIN
    url: str | None = None
    modified_at: datetime | None = None


@dataclass(frozen=True)
class ListedItem:
    """An item a listing names: its id, its modified time when the listing knows it, and
    its content when the listing carries it (Zendesk). ``stands_in``: the item only stands
    in for one the pass did not list otherwise (a Zendesk locale's fallback)."""

    external_id: str
    modified_at: datetime | None = None
    content: FetchedItem | None = None
    stands_in: bool = False


@dataclass(frozen=True)
class ListedPage:
    """One page of a listing (see the module's table). ``complete``: False when the page
    could not list everything it covers, so the pass removes nothing by absence."""

    items: list[ListedItem]
    checkpoint: str | None
    watermark: str | None = None
    complete: bool = True


class KbConnector(Protocol):
    """A provider's adapter. Implementations raise the shared error hierarchy."""

    @property
    def provider(self) -> str: ...

    @property
    def removal(self) -> Literal["listing", "proof"]: ...

    @property
    def incremental(self) -> bool: ...

    @property
    def credentials_model(self) -> type[BaseModel]:
        """The credential fields a connection must hold (validated when stored)."""
        ...

    @property
    def connection_model(self) -> type[BaseModel]:
        """The connection's own settings (an account's site or subdomain)."""
        ...

    @property
    def settings_model(self) -> type[BaseModel]:
        """A base binding's settings (the provider scope)."""
        ...

    @property
    def item_pattern(self) -> str:
        """What a single item's id looks like (a regular expression)."""
        ...

    @property
    def item_help(self) -> str: ...

    def default_base_url(self, connection_settings: Mapping[str, Any]) -> str: ...

    def list_page(
        self, access: ConnectorAccess, checkpoint: str | None, since: str | None
    ) -> ListedPage: ...

    def fetch(self, access: ConnectorAccess, external_id: str) -> FetchedItem | None: ...

    def confirm_gone(
        self, access: ConnectorAccess, external_ids: Sequence[str]
    ) -> frozenset[str]: ...

    def blocked_until(self, access: ConnectorAccess) -> datetime | None: ...
