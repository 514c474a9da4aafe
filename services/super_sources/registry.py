"""The source registry: one entry per super source, and everything the three families need
to know about it (seed 004's ``SuperSources`` and ``SUPER_SOURCE_TO_TIER``).

=====================  ================================================================
an entry declares       used by
=====================  ================================================================
``connector``           its root and indexable node types (``root_node_types``,
                        ``indexable_node_types``); the import walks it, the index
                        fetches from it
``default_base_url``    the API's address when neither the connection nor the
                        configuration (``SPEEDTIER_PROVIDER_URLS``) names one
``rate_limit``          the check before every provider call: when the connection is
                        blocked until a reset, the job is delayed to it (no attempt
                        spent)
``webhook_reserve``     the provider calls per quota window kept back for webhook work:
                        import and index jobs wait for the reset when the quota left is
                        at or under it, webhook jobs only when it is spent
``webhooks``            ``POST /webhooks/<source>/<path>``: signature scheme
                        (``verify``), reading (``parse``) and the job's processor
=====================  ================================================================

The tier is not an entry's to choose freely: it is the tier table's
(``tiers.table.PROVIDER_TIERS``), where a source missing from the table runs in the slow
tier. Adding a source is one entry here plus its connector module: the six queues, their
workers and the chart stay as they are (``tests/.../test_registry.py`` proves it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from services.connectors.nodes import (
    Connection,
    NodeRef,
    NodeSource,
    RateLimitState,
    WebhookEvent,
    WebhookParse,
    WebhookVerify,
)
from tiers.table import tier_for_provider


class RateLimitCheck(Protocol):
    """``check(rate_limits, connection, reserved=...)``: when the connection may call its
    provider again (None: now); ``reserved`` is True for webhook work, which may spend the
    calls the source keeps back (``SourceEntry.webhook_reserve``)."""

    def __call__(
        self, rate_limits: RateLimitState, conn: Connection, *, reserved: bool
    ) -> datetime | None: ...


@dataclass(frozen=True)
class WebhookWork:
    """What a webhook delivery asks for: nodes to index again under ``root``."""

    refs: list[NodeRef]
    root: NodeRef | None = None


#: ``processor(connection, event)``: the work a delivery asks for. It runs in the webhook
#: job (not in the route), so it may call the provider.
WebhookProcessor = Callable[[Connection, WebhookEvent], WebhookWork]


def quota_check(
    rate_limits: RateLimitState, conn: Connection, *, reserved: bool
) -> datetime | None:
    """The default check: the quota the connector recorded from the provider's headers."""
    return rate_limits.blocked_until(conn, reserved=reserved)


def index_touched(_conn: Connection, event: WebhookEvent) -> WebhookWork:
    """The default processor: index every node the delivery names again; a removed node's
    index job finds it gone at the provider and removes it from the index."""
    seen: dict[NodeRef, None] = dict.fromkeys([*event.refs, *event.removed])
    return WebhookWork(list(seen), event.root)


@dataclass(frozen=True)
class WebhookSpec:
    """One webhook a source receives at ``/webhooks/<source>/<path>``.

    Attributes:
      path: the last segment of the URL (``events``).
      scheme: the signature scheme, for people (``X-Hub-Signature-256 HMAC-SHA256``).
      verify / parse: the connector's functions.
      processor: turns a parsed delivery into index work, in the webhook job.
    """

    path: str
    scheme: str
    verify: WebhookVerify
    parse: WebhookParse
    processor: WebhookProcessor = index_touched


@dataclass(frozen=True)
class SourceEntry:
    """One super source."""

    connector: NodeSource
    default_base_url: str = ""
    rate_limit: RateLimitCheck = quota_check
    webhooks: tuple[WebhookSpec, ...] = ()
    #: calls per quota window kept back for webhook work (0: none; see the table above)
    webhook_reserve: int = 0

    @property
    def source(self) -> str:
        return self.connector.source

    @property
    def root_node_types(self) -> tuple[str, ...]:
        return tuple(self.connector.root_node_types)

    @property
    def indexable_node_types(self) -> tuple[str, ...]:
        return tuple(self.connector.indexable_node_types)

    @property
    def tier(self) -> str:
        """The tier table's tier for this source (unknown: slow)."""
        return tier_for_provider(self.source)

    def webhook(self, path: str) -> WebhookSpec | None:
        return next((hook for hook in self.webhooks if hook.path == path), None)


@dataclass(frozen=True)
class SourceRegistry:
    """Every registered source by name."""

    entries: Mapping[str, SourceEntry] = field(default_factory=dict)

    @classmethod
    def of(cls, entries: Sequence[SourceEntry]) -> SourceRegistry:
        by_name: dict[str, SourceEntry] = {}
        for entry in entries:
            if entry.source in by_name:
                raise ValueError(f"super source {entry.source!r} registered twice")
            by_name[entry.source] = entry
        return cls(by_name)

    def get(self, source: str) -> SourceEntry | None:
        return self.entries.get(source)

    def names(self) -> list[str]:
        return sorted(self.entries)

    def __iter__(self) -> Iterator[SourceEntry]:
        return iter(self.entries.values())

    def webhook_reserves(self) -> dict[str, int]:
        """Each source's ``webhook_reserve`` (for :class:`RateLimitState`)."""
        return {entry.source: entry.webhook_reserve for entry in self}

    def with_entry(self, entry: SourceEntry) -> SourceRegistry:
        """This registry plus ``entry`` (a test's or a plug-in's source)."""
        return SourceRegistry.of([*self, entry])
