"""Ingestion's SQL: knowledge bases, documents, versions, chunks, API keys and usage events,
one module per aggregate; every public name is importable from here (``store.add_document``).

Every function takes a session and (but for :func:`organization_for_key` and the ticks'
cross-tenant sweeps) an ``organization_id`` that every statement filters on. A missing,
deleted or other organization's record raises :class:`~shared.errors.RecordMissing`, the
same for all three (the API answers 404). Nothing here commits: the caller owns the unit of
work, and enqueues (``ingest-document-<id>``) only after its commit.

Locks (:mod:`.locks`): a document's writers (the pipeline's replacement, a re-upload, a
retry, a delete) take :func:`lock_document` (a transaction-scoped advisory lock) so they
serialise without holding row locks across slow work; adding a document by name takes a
lock on that name, so two uploads of one name cannot both create it.
"""

from __future__ import annotations

from services.ingestion.store.api_keys import (
    API_KEY_PREFIX,
    create_api_key,
    hash_api_key,
    organization_for_key,
    revoke_api_key,
)
from services.ingestion.store.chunks import (
    chunk_count,
    has_chunks,
    list_chunks,
    set_chunk_audience,
)
from services.ingestion.store.connections import (
    ConnectionInUse,
    ConnectionNameTaken,
    create_binding,
    create_connection,
    delete_binding,
    delete_connection,
    get_binding,
    get_connection,
    list_bindings,
    list_connections,
    rotate_all,
    sealed_credentials,
    update_connection,
)
from services.ingestion.store.connector_items import (
    KnownItem,
    Landing,
    known_items,
    land_document,
    mark_listed,
    remove_items,
    save_item,
    touch_item,
    unlisted_items,
)
from services.ingestion.store.deletions import delete_document, delete_knowledge_base
from services.ingestion.store.document_reads import DocumentRead, DocumentState, read_document
from services.ingestion.store.document_sources import (
    MAX_CRAWL_DEPTH,
    DocumentSource,
    DocumentTooLarge,
    FileSource,
    TextSource,
    UrlSource,
)
from services.ingestion.store.documents import (
    SOURCE_READ_SLICE,
    AddedDocument,
    DocumentBusy,
    add_document,
    get_document,
    list_documents,
    locked_document,
    mark_for_retry,
    read_source,
    resubmit,
)
from services.ingestion.store.indexed import NewVersion, mark_indexed
from services.ingestion.store.knowledge_bases import (
    create_knowledge_base,
    get_knowledge_base,
    list_knowledge_bases,
    refresh_interval_of,
    set_refresh_schedule,
)
from services.ingestion.store.locks import lock_document
from services.ingestion.store.names import MAX_NAME_LENGTH
from services.ingestion.store.sweeps import (
    DueBinding,
    DueDocument,
    bindings_to_sync,
    documents_to_ingest,
    documents_to_refresh,
)
from services.ingestion.store.usage import (
    INGESTED_EVENT,
    UsageTotals,
    record_usage_event,
    usage_summary,
)
from services.ingestion.store.versions import (
    RETAINED_SNAPSHOTS,
    add_version,
    get_version,
    list_versions,
)

__all__ = [
    "API_KEY_PREFIX",
    "INGESTED_EVENT",
    "MAX_CRAWL_DEPTH",
    "MAX_NAME_LENGTH",
    "RETAINED_SNAPSHOTS",
    "SOURCE_READ_SLICE",
    "AddedDocument",
    "ConnectionInUse",
    "ConnectionNameTaken",
    "DocumentBusy",
    "DocumentRead",
    "DocumentSource",
    "DocumentState",
    "DocumentTooLarge",
    "DueBinding",
    "DueDocument",
    "FileSource",
    "KnownItem",
    "Landing",
    "NewVersion",
    "TextSource",
    "UrlSource",
    "UsageTotals",
    "add_document",
    "add_version",
    "bindings_to_sync",
    "chunk_count",
    "create_api_key",
    "create_binding",
    "create_connection",
    "create_knowledge_base",
    "delete_binding",
    "delete_connection",
    "delete_document",
    "delete_knowledge_base",
    "documents_to_ingest",
    "documents_to_refresh",
    "get_binding",
    "get_connection",
    "get_document",
    "get_knowledge_base",
    "get_version",
    "has_chunks",
    "hash_api_key",
    "known_items",
    "land_document",
    "list_bindings",
    "list_chunks",
    "list_connections",
    "list_documents",
    "list_knowledge_bases",
    "list_versions",
    "lock_document",
    "locked_document",
    "mark_for_retry",
    "mark_indexed",
    "mark_listed",
    "organization_for_key",
    "read_document",
    "read_source",
    "record_usage_event",
    "refresh_interval_of",
    "remove_items",
    "resubmit",
    "revoke_api_key",
    "rotate_all",
    "save_item",
    "sealed_credentials",
    "set_chunk_audience",
    "set_refresh_schedule",
    "touch_item",
    "unlisted_items",
    "update_connection",
    "usage_summary",
]
