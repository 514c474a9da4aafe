"""A document's indexed state written in one statement: its new version (when the content
changed), the versions past retention deleted, its previous chunk set deleted, the document
marked ready with its new hash, fingerprint and version, and the usage event recorded.

These writes belong together (the pipeline makes them under the document's lock, then
copies the new chunk set in, then commits), so they go to the server as one statement of
data-modifying CTEs: one round trip, one plan, no ORM flush, where they were five
statements (an ``INSERT``, a ``DELETE``, an ``UPDATE``, an ``INSERT ... RETURNING`` and,
from the tenth version on, another ``DELETE``). The CTEs touch different tables and read
nothing another one writes, so running them under one snapshot changes nothing.

The statement is fixed text (two variants: with a new version or without), sent on the
session's own psycopg connection, in its transaction: it runs for every ingested document,
and psycopg prepares it after a few runs, so the server plans it once per connection and
the client builds no SQL per document. The document's ORM instance is given the written
values as its loaded state, so the session neither flushes them again nor reads them back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from services.ingestion.store.usage import INGESTED_EVENT
from services.ingestion.store.versions import RETAINED_SNAPSHOTS
from shared.db.base import API2_SCHEMA
from shared.db.driver import driver_execute
from shared.db.models.ingestion import KbDocument
from shared.errors import RecordMissing

_DELETE_CHUNKS = (
    f"old_chunks AS (DELETE FROM {API2_SCHEMA}.kb_chunks "
    "WHERE organization_id = %(organization_id)s AND document_id = %(document_id)s)"
)
_VERSION = (
    f"new_version AS (INSERT INTO {API2_SCHEMA}.kb_document_versions (organization_id, "
    "document_id, version, content, content_hash, cause, created_at) VALUES "
    "(%(organization_id)s, %(document_id)s, %(version_number)s, %(content)s, "
    "%(version_hash)s, %(cause)s, %(now)s)), "
    f"old_versions AS (DELETE FROM {API2_SCHEMA}.kb_document_versions "
    "WHERE organization_id = %(organization_id)s AND document_id = %(document_id)s "
    "AND version < %(oldest_kept)s)"
)
_EVENT = (
    f"event AS (INSERT INTO {API2_SCHEMA}.usage_events (organization_id, kind, subject_id, "
    "payload, created_at) VALUES (%(organization_id)s, %(kind)s, %(document_id)s, "
    "%(payload)s, %(now)s))"
)
_MARK = (
    f"marked AS (UPDATE {API2_SCHEMA}.kb_documents SET status = 'ready', ready_at = %(now)s, "
    "failure_reason = NULL, failed_at = NULL, updated_at = %(now)s, attempts = attempts + 1, "
    "content_hash = %(content_hash)s, index_fingerprint = %(index_fingerprint)s, "
    "current_version = %(version)s "
    "WHERE organization_id = %(organization_id)s AND id = %(document_id)s RETURNING attempts)"
)
#: The statement, with a new version (True) or keeping the current one (False).
STATEMENTS = {
    True: f"WITH {_DELETE_CHUNKS}, {_VERSION}, {_EVENT}, {_MARK} SELECT attempts FROM marked",
    False: f"WITH {_DELETE_CHUNKS}, {_EVENT}, {_MARK} SELECT attempts FROM marked",
}


@dataclass(frozen=True)
class NewVersion:
    """The content a pass makes current, as its version row keeps it."""

    version: int
    content: str
    content_hash: str
    cause: str | None


def mark_indexed(
    session: Session,
    document: KbDocument,
    *,
    version: int,
    content_hash: str,
    index_fingerprint: str,
    new_version: NewVersion | None,
    payload: Mapping[str, object],
    now: datetime,
) -> None:
    """Write, in one statement of the caller's transaction, ``new_version`` (None: the
    content is the current version's) and the deletion of the versions past retention, the
    deletion of the document's chunk set, the document ``ready`` at ``version`` with
    ``content_hash`` and ``index_fingerprint`` (its attempt counted), and its ingestion
    usage event (``payload`` after its base and version). The caller holds the document's
    lock, then writes the new chunk set and commits.

    Raises:
      RecordMissing: the document row is gone (it cannot be while the caller holds the
        lock and read it under it).
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    parameters: dict[str, Any] = {
        "organization_id": document.organization_id,
        "document_id": document.id,
        "version": version,
        "content_hash": content_hash,
        "index_fingerprint": index_fingerprint,
        "kind": INGESTED_EVENT,
        "payload": Jsonb(
            {"knowledge_base_id": document.knowledge_base_id, "version": version, **payload}
        ),
        "now": now,
    }
    if new_version is not None:
        parameters |= {
            "version_number": new_version.version,
            "content": new_version.content,
            "version_hash": new_version.content_hash,
            "cause": new_version.cause,
            "oldest_kept": new_version.version - RETAINED_SNAPSHOTS,
        }
    row = driver_execute(session, STATEMENTS[new_version is not None], parameters)
    if row is None:
        raise RecordMissing(f"document {document.id} not found")
    written = {
        "status": "ready",
        "ready_at": now,
        "failure_reason": None,
        "failed_at": None,
        "updated_at": now,
        "content_hash": content_hash,
        "index_fingerprint": index_fingerprint,
        "current_version": version,
        "attempts": row[0],
    }
    for key, value in written.items():
        set_committed_value(document, key, value)
