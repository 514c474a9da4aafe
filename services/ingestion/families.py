"""The ingestion job families: ingest one document, re-fetch one URL document, sync one
connector binding.

``ingestion`` runs in the fast tier with a group cap of one per organization
(``INGEST_GROUP_CAPS``): tenants ingest in parallel, one tenant's documents one at a time,
which is the back-pressure the embedding provider's per-project rate limit calls for.
``ingestion_refresh`` fetches pages from arbitrary hosts, so it runs in the slow tier, also
one at a time per organization; a changed page is handed back to ``ingestion``.
``kb_connector_sync`` (``kb-connector-sync-<binding id>``) lists and fetches a provider's
items (Notion, Confluence, Google Drive, SharePoint, Zendesk) in the slow tier, two bindings
of one organization at a time, its starts in a window per connection; its landed documents
go to ``ingestion``. A sync is resumable (its pass's checkpoint is on the binding), so it
gets a long run time and the external-service backoff.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Field

from router.requests import JobRequest
from shared.inputs import NUL_FREE, PARAMS_CONFIG, Id
from tiers.families import Family
from tiers.policies import RetryPolicy, WindowRule

if TYPE_CHECKING:
    from services.ingestion.actors import IngestionActors

PAUSE_FLAG = "pause_api2_ingestion"
INGEST_KIND = "ingest_document"
REFRESH_KIND = "refresh_document"
SYNC_KIND = "sync_connector"

#: Three attempts, 30 s then 60 s apart: an embedding provider's hiccup passes, and a
#: document that keeps failing is marked failed on the third (see pipeline.run_ingestion).
INGEST_RETRY = RetryPolicy(max_attempts=3, base_seconds=30.0)
#: A refresh records its own failures and backs off per document; the platform retries
#: only what escapes that (the database being away).
REFRESH_RETRY = RetryPolicy(max_attempts=2, base_seconds=60.0)
#: One tenant's documents ingest one at a time (seed 003); refreshes likewise.
INGEST_GROUP_CAPS = {"fast": 1}
REFRESH_GROUP_CAPS = {"slow": 1}
#: Five attempts, 15 s to 2 min apart (a provider's 5xx passes); a rate limit is a Delay.
SYNC_RETRY = RetryPolicy(
    max_attempts=5, backoff="exponential", base_seconds=15.0, max_backoff_seconds=600.0
)
#: Two bindings of one organization at a time (its Drive and its SharePoint, say).
SYNC_GROUP_CAPS = {"slow": 2}
#: Starts (a sync, or its resumption after a delay) per connection: Notion as seed 000's
#: Notion source window, the others at most one a second on average.
SYNC_WINDOWS = {"notion": WindowRule(4, 60.0), "*": WindowRule(60, 60.0)}
#: A pass lists and fetches a whole provider scope in one job (its checkpoint survives).
SYNC_TIME_LIMIT_SECONDS = 3 * 3600.0


class DocumentParams(BaseModel):
    """Both families' parameters: the document (and its base, when the caller knows it)."""

    model_config = PARAMS_CONFIG

    document_id: Id
    knowledge_base_id: Id | None = None


class ConnectorSyncParams(BaseModel):
    """A binding to sync; ``provider`` and ``connection_id`` route it (window per
    connection); ``full`` lists everything (not only what changed); ``scheduled``: the
    freshness tick asked (a single item's re-fetch is then a ``refresh``)."""

    model_config = PARAMS_CONFIG

    binding_id: Id
    connection_id: Id
    provider: Annotated[str, NUL_FREE] = Field(min_length=1, max_length=64)
    full: bool = False
    scheduled: bool = False


def sync_job_id(binding_id: int) -> str:
    return f"kb-connector-sync-{binding_id}"


def sync_request(
    organization_id: int,
    binding_id: int,
    connection_id: int,
    provider: str,
    *,
    full: bool = False,
    scheduled: bool = False,
) -> JobRequest:
    """The request that syncs a binding (an id already queued or running is a no-op)."""
    return JobRequest(
        SYNC_KIND,
        organization_id,
        {
            "binding_id": binding_id,
            "connection_id": connection_id,
            "provider": provider,
            "full": full,
            "scheduled": scheduled,
        },
    )


def ingest_job_id(document_id: int) -> str:
    return f"ingest-document-{document_id}"


def refresh_job_id(document_id: int) -> str:
    return f"refresh-document-{document_id}"


def _document_request(
    kind: str, organization_id: int, document_id: int, knowledge_base_id: int | None
) -> JobRequest:
    params: dict[str, Any] = {"document_id": document_id}
    if knowledge_base_id is not None:
        params["knowledge_base_id"] = knowledge_base_id
    return JobRequest(kind, organization_id, params)


def ingest_request(
    organization_id: int, document_id: int, knowledge_base_id: int | None = None
) -> JobRequest:
    """The request that ingests a document (enqueue after the commit that made it
    ``processing``; an id already queued or running is a no-op)."""
    return _document_request(INGEST_KIND, organization_id, document_id, knowledge_base_id)


def refresh_request(
    organization_id: int, document_id: int, knowledge_base_id: int | None = None
) -> JobRequest:
    """The request that re-fetches a ready URL document."""
    return _document_request(REFRESH_KIND, organization_id, document_id, knowledge_base_id)


def families(actors: IngestionActors) -> list[Family]:
    """The ingestion families, each bound to its actor body by reference."""
    return [
        Family(
            name="ingestion",
            kind=INGEST_KIND,
            handler=actors.ingest_document,
            params=DocumentParams,
            job_id=lambda _org, p: ingest_job_id(p.document_id),
            fixed_tier="fast",
            pause_flag=PAUSE_FLAG,
            retry=INGEST_RETRY,
            group_caps=INGEST_GROUP_CAPS,
        ),
        Family(
            name="ingestion_refresh",
            kind=REFRESH_KIND,
            handler=actors.refresh_document,
            params=DocumentParams,
            job_id=lambda _org, p: refresh_job_id(p.document_id),
            fixed_tier="slow",
            pause_flag=PAUSE_FLAG,
            retry=REFRESH_RETRY,
            group_caps=REFRESH_GROUP_CAPS,
        ),
        Family(
            name="kb_connector_sync",
            kind=SYNC_KIND,
            handler=actors.sync_connector,
            params=ConnectorSyncParams,
            job_id=lambda _org, p: sync_job_id(p.binding_id),
            fixed_tier="slow",
            provider=lambda p: p.provider,
            window_scope=lambda _org, p: f"connection-{p.connection_id}",
            windows=SYNC_WINDOWS,
            pause_flag=PAUSE_FLAG,
            retry=SYNC_RETRY,
            group_caps=SYNC_GROUP_CAPS,
            time_limit_seconds=SYNC_TIME_LIMIT_SECONDS,
        ),
    ]
