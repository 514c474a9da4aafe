"""What the three families' units need besides a session: the registry, how to reach a
connection's provider, its quota, the chunker and embedder, and the counters."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import redis

from services.connectors.nodes import Connection, RateLimitState
from services.indexing.chunking import Chunker
from services.indexing.embedders import Embedder
from services.super_sources.connection_secrets import credentials_of
from services.super_sources.registry import SourceEntry, SourceRegistry
from shared import metrics
from shared.credentials import CredentialBox
from shared.db.models.super_sources import SuperSourceConnection
from shared.errors import Delay, Unrecoverable

#: Jobs waiting for one quota reset start within this many seconds after it.
QUOTA_JITTER_SECONDS = 1.0

#: ``super.<source>.<outcome>`` as Prometheus sees it (names cannot hold dots).
INDEXATIONS = metrics.counter(
    "super_indexations",
    "Super-source index jobs by source and outcome (indexation, already_indexed, removed).",
    ["source", "outcome"],
)


@dataclass(frozen=True)
class SuperContext:
    """The super sources' dependencies, built once by ``register``.

    Attributes:
      provider_urls: configuration's API addresses by source (win over an entry's default).
      client / namespace: Redis, for the counters and the webhook replay guard.
    """

    registry: SourceRegistry
    rate_limits: RateLimitState
    chunker: Chunker
    embedder: Embedder
    client: redis.Redis
    namespace: str
    provider_urls: Mapping[str, str]
    #: Opens connections' sealed credentials and webhook secrets.
    box: CredentialBox = field(default_factory=CredentialBox)
    timeout: float = 30.0

    def entry(self, source: str) -> SourceEntry:
        """The source's entry; Unrecoverable for a source this process does not know."""
        entry = self.registry.get(source)
        if entry is None:
            raise Unrecoverable(f"unknown super source {source!r}")
        return entry

    def connection(self, row: SuperSourceConnection) -> Connection:
        """The connector's view of a connection row."""
        entry = self.entry(row.source)
        return Connection(
            source=row.source,
            connection_id=row.id,
            organization_id=row.organization_id,
            base_url=row.base_url or self.provider_urls.get(row.source) or entry.default_base_url,
            credentials=credentials_of(row, self.box),
            settings=dict(row.settings or {}),
            timeout=self.timeout,
            rate_limits=self.rate_limits,
        )

    def wait_for_quota(self, conn: Connection, *, webhook: bool = False) -> None:
        """Before a provider call: when the connection is blocked until a reset, raise a
        Delay to it (no attempt spent, and not counted toward the family's delay limit).
        ``webhook``: webhook work, which may spend the source's ``webhook_reserve`` (import
        and index work wait when the quota left is at or under it)."""
        until = self.entry(conn.source).rate_limit(self.rate_limits, conn, reserved=webhook)
        if until is not None and until > datetime.now(UTC):
            # Pacing, not the provider's refusal: no call was made, and the quota reopens at
            # its reset. Counted as a provider delay, a job losing the race at a few resets
            # of a busy connection would spend attempts (DelaysExhausted) without one error.
            # The jitter spreads the jobs waiting for one reset over a second.
            again = until.timestamp() + random.uniform(0.0, QUOTA_JITTER_SECONDS)
            raise Delay(again, reason="rate-limit", source="pacing")

    def count(self, source: str, what: str) -> None:
        """Add one to ``super.<source>.<what>`` (``indexation``, ``already_indexed``...):
        the Prometheus counter ``speedtier_super_indexations_total{source, outcome}`` (a
        source outside the registry is labelled ``other``, keeping labels bounded) and a
        Redis hash that ``speedtier super status`` prints."""
        label = source if source in self.registry.entries else "other"
        INDEXATIONS.labels(source=label, outcome=what).inc()
        self.client.hincrby(self.counters_key, f"super.{source}.{what}", 1)

    @property
    def counters_key(self) -> str:
        return f"{self.namespace}:super:counters"
