"""One delivery of a connector sync: what it needs (:class:`SyncContext`), the binding as
it reads it (:class:`Run`), what it did (:class:`SyncOutcome`), and the steps every kind of
binding shares: open the credentials and the pass, wait for the connection's quota, record
a success."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from services.connectors.nodes import RateLimitState
from services.ingestion import store
from services.ingestion.connector_sync.adapters import ConnectorAccess, KbConnector
from services.ingestion.url_sources import next_refresh_time, refresh_interval_seconds
from shared.credentials import CredentialBox
from shared.db.engine import session_scope
from shared.db.models.kb_connectors import KbConnection, KbConnectorBinding
from shared.errors import Delay, Unrecoverable

#: A pass resumed after this long starts over.
MAX_PASS_AGE = timedelta(days=1)
#: Jobs waiting for one quota reset start within this many seconds after it.
QUOTA_JITTER_SECONDS = 1.0


@dataclass(frozen=True)
class SyncContext:
    """What a sync needs besides a session: the credentials box, the connectors, where
    their APIs answer (configuration overrides), the quota store and the intervals."""

    box: CredentialBox
    connectors: Mapping[str, KbConnector]
    provider_urls: Mapping[str, str] = field(default_factory=dict)
    rate_limits: RateLimitState | None = None
    timeout: float = 30.0
    recrawl_interval_seconds: float = 86_400.0

    def connector(self, provider: str) -> KbConnector:
        found = self.connectors.get(provider)
        if found is None:
            raise Unrecoverable(f"no connector for provider {provider!r}")
        return found

    def access(
        self, binding: KbConnectorBinding, connection: KbConnection, sealed: bytes
    ) -> ConnectorAccess:
        """The binding's way to its provider (the credentials opened here)."""
        connector = self.connector(binding.provider)
        settings = dict(connection.settings or {})
        return ConnectorAccess(
            provider=binding.provider,
            organization_id=binding.organization_id,
            connection_id=binding.connection_id,
            binding_id=binding.id,
            base_url=self.provider_urls.get(binding.provider)
            or connector.default_base_url(settings),
            credentials=self.box.open(sealed),
            connection_settings=settings,
            settings=dict(binding.settings or {}),
            timeout=self.timeout,
            rate_limits=self.rate_limits,
        )

    def interval(self, refresh_schedule: str | None) -> float:
        return refresh_interval_seconds(refresh_schedule, self.recrawl_interval_seconds)


@dataclass
class SyncOutcome:
    """What one delivery of a sync did (``finished``: the pass completed)."""

    pages: int = 0
    listed: int = 0
    landed: int = 0
    unchanged: int = 0
    removed: int = 0
    #: items the provider refused to give (a 403 on one file, an export too large): kept as
    #: they were, named in the binding's ``last_error``
    unreadable: list[str] = field(default_factory=list)
    finished: bool = False
    document_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Run:
    """One delivery's view of the binding."""

    organization_id: int
    binding_id: int
    knowledge_base_id: int
    connector: KbConnector
    access: ConnectorAccess
    interval: float
    mode: str
    started: datetime
    checkpoint: str | None
    since: str | None
    item_id: str | None
    document_id: int | None


def open_run(
    sessions: sessionmaker[Session],
    ctx: SyncContext,
    organization_id: int,
    binding_id: int,
    full: bool,
    now: datetime,
) -> Run:
    """Read the binding, open its credentials and start a pass when none is under way."""
    with session_scope(sessions) as session:
        binding = store.get_binding(
            session, organization_id=organization_id, binding_id=binding_id, for_update=True
        )
        base = store.get_knowledge_base(
            session, organization_id=organization_id, knowledge_base_id=binding.knowledge_base_id
        )
        connection = store.get_connection(
            session, organization_id=organization_id, connection_id=binding.connection_id
        )
        sealed = store.sealed_credentials(
            session, organization_id=organization_id, connection_id=binding.connection_id
        )
        connector = ctx.connector(binding.provider)
        access = ctx.access(binding, connection, sealed)
        stale = binding.pass_started_at is not None and binding.pass_started_at < now - MAX_PASS_AGE
        if binding.item_id is None and (
            binding.pass_started_at is None or stale or (full and binding.pass_mode != "full")
        ):
            incremental = connector.incremental and binding.watermark and not full
            binding.pass_mode = "incremental" if incremental else "full"
            binding.pass_started_at = now
            binding.pass_complete = True
            binding.checkpoint = None
        run = Run(
            organization_id=organization_id,
            binding_id=binding_id,
            knowledge_base_id=binding.knowledge_base_id,
            connector=connector,
            access=access,
            interval=ctx.interval(base.refresh_schedule),
            mode=binding.pass_mode or "full",
            started=binding.pass_started_at or now,
            checkpoint=binding.checkpoint,
            since=binding.watermark if binding.pass_mode == "incremental" else None,
            item_id=binding.item_id,
            document_id=binding.document_id,
        )
        session.commit()
    return run


def restart_as_full(sessions: sessionmaker[Session], run: Run, checkpoint: str | None) -> Run:
    """The incremental pass ``run`` turned into a full one from ``checkpoint`` (None: its
    first page): the provider rejected its change token (``ResyncRequired``). The token is
    dropped, the pass keeps its start time (items already listed count as listed), and its
    end removes only what the full listing no longer has."""
    with session_scope(sessions) as session:
        binding = locked_binding(session, run)
        binding.pass_mode = "full"
        binding.watermark = None
        binding.checkpoint = checkpoint
        binding.pass_complete = True
        session.commit()
    return replace(run, mode="full", since=None, checkpoint=checkpoint)


def locked_binding(session: Session, run: Run) -> KbConnectorBinding:
    return store.get_binding(
        session, organization_id=run.organization_id, binding_id=run.binding_id, for_update=True
    )


def wait_for_quota(run: Run) -> None:
    """Before a provider call: delay to the reset when the connection's quota is spent
    (pacing: no call was made, so it does not count toward the family's delay limit)."""
    until = run.connector.blocked_until(run.access)
    if until is not None and until > datetime.now(UTC):
        again = until.timestamp() + random.uniform(0.0, QUOTA_JITTER_SECONDS)
        raise Delay(again, reason="rate-limit", source="pacing")


def record_success(binding: KbConnectorBinding, run: Run, now: datetime) -> None:
    binding.checkpoint = None
    binding.pass_mode = None
    binding.pass_started_at = None
    binding.pass_complete = True
    binding.last_synced_at = now
    binding.last_error = None
    binding.sync_failures = 0
    binding.next_sync_at = next_refresh_time(now, run.interval, 0)
    binding.updated_at = now
