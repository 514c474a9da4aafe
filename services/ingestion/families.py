"""The ingestion job families: ingest one document, re-fetch one URL document.

``ingestion`` runs in the fast tier with a group cap of one per organization
(``INGEST_GROUP_CAPS``): tenants ingest in parallel, one tenant's documents one at a time,
which is the back-pressure the embedding provider's per-project rate limit calls for.
``ingestion_refresh`` fetches pages from arbitrary hosts, so it runs in the slow tier, also
one at a time per organization; a changed page is handed back to ``ingestion``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from router.requests import JobRequest
from shared.inputs import Id
from tiers.families import Family
from tiers.policies import RetryPolicy

PAUSE_FLAG = "pause_api2_ingestion"
INGEST_KIND = "ingest_document"
REFRESH_KIND = "refresh_document"

#: Three attempts, 30 s then 60 s apart: an embedding provider's hiccup passes, and a
#: document that keeps failing is marked failed on the third (see pipeline.run_ingestion).
INGEST_RETRY = RetryPolicy(max_attempts=3, base_seconds=30.0)
#: A refresh records its own failures and backs off per document; the platform retries
#: only what escapes that (the database being away).
REFRESH_RETRY = RetryPolicy(max_attempts=2, base_seconds=60.0)
#: One tenant's documents ingest one at a time (seed 003); refreshes likewise.
INGEST_GROUP_CAPS = {"fast": 1}
REFRESH_GROUP_CAPS = {"slow": 1}


class DocumentParams(BaseModel):
    """Both families' parameters: the document (and its base, when the caller knows it)."""

    model_config = ConfigDict(extra="forbid")

    document_id: Id
    knowledge_base_id: Id | None = None


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


def families(handlers: dict[str, Callable[..., Any]]) -> list[Family]:
    """The two ingestion families, bound to their actor bodies."""
    return [
        Family(
            name="ingestion",
            kind=INGEST_KIND,
            handler=handlers[INGEST_KIND],
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
            handler=handlers[REFRESH_KIND],
            params=DocumentParams,
            job_id=lambda _org, p: refresh_job_id(p.document_id),
            fixed_tier="slow",
            pause_flag=PAUSE_FLAG,
            retry=REFRESH_RETRY,
            group_caps=REFRESH_GROUP_CAPS,
        ),
    ]
