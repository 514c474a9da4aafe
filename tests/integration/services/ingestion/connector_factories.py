"""Connections and bindings for the connector tests: a base bound to a provider fake, synced
through the production adapters with the fake's address as the provider URL."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from cryptography.fernet import Fernet
from sqlalchemy import select

from services.app.bootstrap import Platform
from services.connectors.nodes import RateLimitState
from services.indexing.chunking import Chunker
from services.indexing.embedders import HashingEmbedder
from services.ingestion import ingestion_job, store
from services.ingestion.connector_sync.job import run_sync
from services.ingestion.connector_sync.registry import CONNECTORS
from services.ingestion.connector_sync.sync import SyncContext, SyncOutcome
from shared.credentials import CredentialBox
from shared.db.base import utcnow
from shared.db.models import KbDocument
from tests.integration.services.ingestion.factories import new_org

KEY = Fernet.generate_key().decode()


@dataclass
class Bound:
    """A base bound to a connection of ``provider`` whose API answers at ``base_url``."""

    platform: Platform
    provider: str
    base_url: str
    organization_id: int
    knowledge_base_id: int
    connection_id: int
    binding_id: int

    @property
    def ctx(self) -> SyncContext:
        return SyncContext(
            box=CredentialBox.from_setting(KEY),
            connectors=CONNECTORS,
            provider_urls={self.provider: self.base_url},
            rate_limits=RateLimitState(
                self.platform.broker.client, f"{self.platform.settings.redis_namespace}:kb"
            ),
            timeout=5.0,
        )

    def sync(self, **options: Any) -> SyncOutcome:
        """One delivery of the binding's sync job (failures recorded as the job does)."""
        return run_sync(
            self.platform.sessions,
            self.platform.router,
            self.ctx,
            organization_id=self.organization_id,
            binding_id=self.binding_id,
            **options,
        )

    def documents(self) -> dict[str, KbDocument]:
        """Live documents of the base by name (source bytes loaded)."""
        with self.platform.sessions() as session:
            rows = session.scalars(
                select(KbDocument).where(
                    KbDocument.organization_id == self.organization_id,
                    KbDocument.knowledge_base_id == self.knowledge_base_id,
                    KbDocument.deleted_at.is_(None),
                )
            ).all()
            for row in rows:
                _ = row.source_bytes
            return {row.name: row for row in rows}

    def ingest_all(self) -> None:
        for document in self.documents().values():
            if document.status == "processing":
                ingestion_job.run_ingestion(
                    self.platform.sessions,
                    organization_id=self.organization_id,
                    document_id=document.id,
                    chunker=Chunker(),
                    embedder=HashingEmbedder(),
                    final_attempt=True,
                    now=utcnow(),
                )

    def binding(self) -> Any:
        with self.platform.sessions() as session:
            return store.get_binding(
                session, organization_id=self.organization_id, binding_id=self.binding_id
            )


def bind(
    platform: Platform,
    provider: str,
    base_url: str,
    credentials: dict[str, str],
    *,
    settings: dict[str, Any] | None = None,
    connection_settings: dict[str, Any] | None = None,
    item_id: str | None = None,
    schedule: str | None = None,
) -> Bound:
    """A new organization whose base is bound to ``provider`` (settings as the API keeps
    them: validated by the provider's models)."""
    connector = CONNECTORS[provider]
    org = new_org()
    box = CredentialBox.from_setting(KEY)
    checked = (
        connector.settings_model.model_validate(settings or {}).model_dump(
            mode="json", exclude_defaults=True
        )
        if item_id is None
        else {}
    )
    with platform.sessions() as session:
        base = store.create_knowledge_base(
            session, organization_id=org, name="Connected", refresh_schedule=schedule
        )
        connection = store.create_connection(
            session,
            organization_id=org,
            provider=provider,
            name=f"c-{uuid.uuid4().hex[:6]}",
            sealed=box.seal(credentials),
            credential_fields=list(credentials),
            settings=connection_settings or {},
        )
        binding = store.create_binding(
            session,
            organization_id=org,
            knowledge_base_id=base.id,
            connection_id=connection.id,
            settings=checked,
            item_id=item_id,
        )
        session.commit()
        return Bound(platform, provider, base_url, org, base.id, connection.id, binding.id)
