"""Provider name -> its knowledge-base connector (``kb_connections.provider``)."""

from __future__ import annotations

from collections.abc import Mapping

from services.ingestion.connector_sync.adapters import KbConnector
from services.ingestion.connector_sync.drive_sources import (
    GoogleDriveConnector,
    SharepointConnector,
)
from services.ingestion.connector_sync.knowledge_sources import (
    ConfluenceConnector,
    NotionConnector,
    ZendeskConnector,
)
from shared.db.models.kb_connectors import CONNECTOR_PROVIDERS


def default_connectors() -> dict[str, KbConnector]:
    """One adapter per provider of ``CONNECTOR_PROVIDERS``."""
    connectors: dict[str, KbConnector] = {
        "notion": NotionConnector(),
        "confluence": ConfluenceConnector(),
        "google_drive": GoogleDriveConnector(),
        "sharepoint": SharepointConnector(),
        "zendesk": ZendeskConnector(),
    }
    assert set(connectors) == set(CONNECTOR_PROVIDERS)
    return connectors


CONNECTORS: Mapping[str, KbConnector] = default_connectors()
