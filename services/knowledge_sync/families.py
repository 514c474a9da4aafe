"""The knowledge sync job families: request kinds, job ids, tiers, windows, pause flag, and
the requests that enqueue sources and documents.

Request parameters are what Rails sends (``source_id``, ``document_id``, ``crawl_task_id``,
``url``...). ``provider`` and ``organization_data_source_id`` are filled in by whoever
enqueues (the route looks them up for Rails' requests; the units and the tick know them)
so the router can pick the tier and key the window.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Field

from router.requests import JobRequest
from services.web.urls import HTTP_URL, MAX_URL_LENGTH, whatwg_url
from shared.inputs import NUL_FREE, PARAMS_CONFIG, Id, JsonInt
from tiers.families import Family
from tiers.policies import WindowRule

if TYPE_CHECKING:
    from services.knowledge_sync.actors import KnowledgeSyncActors
    from shared.db.models.rails import KnowledgeBaseSource

PAUSE_FLAG = "pause_api2_knowledge_base_sync"

#: Seed 000's provider windows (fixed windows keyed per organization data source).
SOURCE_WINDOWS = {"notion": WindowRule(4, 60.0), "*": WindowRule(20, 1.0)}
DOCUMENT_WINDOWS = {
    "notion": WindowRule(4, 60.0),
    "scribe": WindowRule(50, 60.0),
    "*": WindowRule(3000, 60.0),
}
#: The chunk worker's queue limiter: 60 jobs a minute and 4 at once for the whole family.
CHUNK_WINDOWS = {"*": WindowRule(60, 60.0)}
CHUNK_GROUP_CAPS = {"fast": 4}


class _Routed(BaseModel):
    model_config = PARAMS_CONFIG

    provider: Annotated[str, NUL_FREE] | None = Field(None, max_length=64)
    organization_data_source_id: Id | None = None


class SourceParams(_Routed):
    source_id: Id


class DocumentParams(_Routed):
    document_id: Id


class CrawlStartParams(_Routed):
    crawl_task_id: Id


#: What a crawl takes: an http(s) URL of at most pydantic's ``HttpUrl`` limit.
CrawlUrl = Annotated[
    str,
    Field(min_length=1, max_length=MAX_URL_LENGTH, description="An absolute http(s) URL."),
    HTTP_URL,
]


class CrawlUrlParams(_Routed):
    crawl_task_id: Id
    url: CrawlUrl
    parent_url: CrawlUrl | None = None
    depth: JsonInt = Field(0, ge=0, le=100)


def crawl_url_job_id(crawl_task_id: int, url: str) -> str:
    """``kb-crawl-url-<task>-<sha256(url)[0:24]>``."""
    return f"kb-crawl-url-{crawl_task_id}-{hashlib.sha256(url.encode()).hexdigest()[:24]}"


def _provider(params: Any) -> str | None:
    return params.provider  # type: ignore[no-any-return]


def _crawler(_params: Any) -> str:
    return "url_crawl"


def _scope(organization_id: int, params: Any) -> str:
    ods = params.organization_data_source_id
    return f"ods-{ods}" if ods else f"org-{organization_id}"


def _routing(source: KnowledgeBaseSource) -> dict[str, Any]:
    return {
        "provider": source.type,
        "organization_data_source_id": source.organization_data_source_id,
    }


def document_request(
    kind: str, organization_id: int, document_id: int, source: KnowledgeBaseSource | None
) -> JobRequest:
    params: dict[str, Any] = {"document_id": document_id}
    if source is not None and kind == "sync_document":
        params.update(_routing(source))
    return JobRequest(kind, organization_id, params)


def source_request(
    organization_id: int, source_id: int, source_type: str, ods_id: int | None
) -> JobRequest:
    return JobRequest(
        "sync_source",
        organization_id,
        {"source_id": source_id, "provider": source_type, "organization_data_source_id": ods_id},
    )


def families(actors: KnowledgeSyncActors) -> list[Family]:
    """The five units of seed 000, each bound to its actor body by reference."""
    common: dict[str, Any] = {"pause_flag": PAUSE_FLAG, "provider": _provider}
    return [
        Family(
            name="kb_source_sync",
            kind="sync_source",
            handler=actors.sync_source,
            params=SourceParams,
            job_id=lambda _org, p: f"kb-source-sync-{p.source_id}",
            windows=SOURCE_WINDOWS,
            window_scope=_scope,
            **common,
        ),
        Family(
            name="kb_document_sync",
            kind="sync_document",
            handler=actors.sync_document,
            params=DocumentParams,
            job_id=lambda _org, p: f"kb-document-sync-{p.document_id}",
            windows=DOCUMENT_WINDOWS,
            window_scope=_scope,
            **common,
        ),
        Family(
            # One queue, so the seed's limiter (60 a minute, 4 at once) holds for the whole
            # family: chunking calls the embeddings API, not the source's provider.
            name="kb_document_chunks",
            kind="sync_document_chunks",
            handler=actors.sync_document_chunks,
            params=DocumentParams,
            job_id=lambda _org, p: f"kb-document-chunks-{p.document_id}",
            fixed_tier="fast",
            group_by="global",
            group_caps=CHUNK_GROUP_CAPS,
            windows=CHUNK_WINDOWS,
            pause_flag=PAUSE_FLAG,
        ),
        Family(
            name="kb_crawl_start",
            kind="start_crawl",
            handler=actors.start_crawl,
            params=CrawlStartParams,
            job_id=lambda _org, p: f"kb-crawl-start-{p.crawl_task_id}",
            provider=_crawler,
            pause_flag=PAUSE_FLAG,
        ),
        Family(
            name="kb_crawl_url",
            kind="crawl_url",
            handler=actors.crawl_url,
            params=CrawlUrlParams,
            job_id=lambda _org, p: crawl_url_job_id(p.crawl_task_id, whatwg_url(p.url)),
            provider=_crawler,
            pause_flag=PAUSE_FLAG,
        ),
    ]
