"""A document's indexed state written in one statement, only while the submission the pass
worked on is still the document's: the document marked ready with its new hash,
fingerprint and version, its previous chunk set deleted, its new version (when the content
changed) with the versions past retention deleted, and the usage event recorded.

These writes belong together (the pipeline makes them under the document's lock, then
copies the new chunk set in, then commits), so they go to the server as one statement of
data-modifying CTEs: one round trip, one plan, no ORM flush. The ``UPDATE`` of the document
is guarded: it matches only while the document is live, still in ``processing`` and
still on the submission the pass read (its ``submitted_at``), and every other CTE writes
only ``FROM`` its result, so a pass whose document was re-submitted, finished by a
concurrent run or deleted since its read writes nothing. The pass holds the document's lock,
which every writer of those columns takes, so the guard sees the state that writers left,
and the pass needs no read of the document under the lock: the statement is the check.
The CTEs touch different tables and read nothing another one writes but the marked row's
``RETURNING``, so running them under one snapshot changes nothing.

The statement is fixed text (two variants: with a new version or without), sent on the
session's own psycopg connection, in its transaction: it runs for every ingested document,
and psycopg prepares it after a few runs, so the server plans it once per connection and
the client builds no SQL per document. A document's ORM instance held by the caller is given
the written values as its loaded state, so the session neither flushes them again nor
reads them back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from services.ingestion.store.document_reads import DocumentState
from services.ingestion.store.usage import INGESTED_EVENT
from services.ingestion.store.versions import RETAINED_SNAPSHOTS
from shared.db.base import API2_SCHEMA
from shared.db.driver import driver_execute
from shared.db.models.ingestion import KbDocument

_MARK = (
    f"marked AS (UPDATE {API2_SCHEMA}.kb_documents SET status = 'ready', ready_at = %(now)s, "
    "failure_reason = NULL, failed_at = NULL, updated_at = %(now)s, attempts = attempts + 1, "
    "content_hash = %(content_hash)s, index_fingerprint = %(index_fingerprint)s, "
    "current_version = %(version)s "
    "WHERE organization_id = %(organization_id)s AND id = %(document_id)s "
    "AND submitted_at = %(submitted_at)s AND status = 'processing' AND deleted_at IS NULL "
    "RETURNING attempts)"
)
# Every other write happens only when the document was marked (``FROM marked``).
_DELETE_CHUNKS = (
    f"old_chunks AS (DELETE FROM {API2_SCHEMA}.kb_chunks "
    "WHERE organization_id = %(organization_id)s AND document_id = %(document_id)s "
    "AND EXISTS (SELECT FROM marked))"
)
_VERSION = (
    f"new_version AS (INSERT INTO {API2_SCHEMA}.kb_document_versions (organization_id, "
    "document_id, version, content, content_hash, cause, created_at) "
    "SELECT %(organization_id)s::int8, %(document_id)s::int8, %(version_number)s::int4, "
    "%(content)s::text, %(version_hash)s::text, %(cause)s::text, %(now)s::timestamptz "
    "FROM marked), "
    f"old_versions AS (DELETE FROM {API2_SCHEMA}.kb_document_versions "
    "WHERE organization_id = %(organization_id)s AND document_id = %(document_id)s "
    "AND version < %(oldest_kept)s AND EXISTS (SELECT FROM marked))"
)
_EVENT = (
    f"event AS (INSERT INTO {API2_SCHEMA}.usage_events (organization_id, kind, subject_id, "
    "payload, created_at) SELECT %(organization_id)s::int8, %(kind)s::text, "
    "%(document_id)s::int8, %(payload)s::jsonb, %(now)s::timestamptz FROM marked)"
)
#: The statement, with a new version (True) or keeping the current one (False).
STATEMENTS = {
    True: f"WITH {_MARK}, {_DELETE_CHUNKS}, {_VERSION}, {_EVENT} SELECT attempts FROM marked",
    False: f"WITH {_MARK}, {_DELETE_CHUNKS}, {_EVENT} SELECT attempts FROM marked",
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
    document: DocumentState,
    *,
    version: int,
    content_hash: str,
    index_fingerprint: str,
    new_version: NewVersion | None,
    payload: Mapping[str, object],
    now: datetime,
    loaded: KbDocument | None = None,
) -> bool:
    """Write, in one statement of the caller's transaction, the document ``ready`` at
    ``version`` with ``content_hash`` and ``index_fingerprint`` (its attempt counted), the
    deletion of its chunk set, ``new_version`` (None: the content is the current version's)
    and the deletion of the versions past retention, and its ingestion usage event
    (``payload`` after its base and version): all of it only while the document is live and
    in ``processing`` on the submission ``document`` was read at. The caller holds the
    document's lock, then writes the new chunk set and commits.

    Parameters:
      document: the document as the pass read it (its ids, base and ``submitted_at``).
      loaded: the document's ORM instance in ``session``, if the caller holds one: it is
        given the written values as its loaded state.

    Returns:
      True when written; False when the document was re-submitted, settled or deleted
      since ``document`` was read (nothing was written; the caller reads why).
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    parameters: dict[str, Any] = {
        "organization_id": document.organization_id,
        "document_id": document.id,
        "submitted_at": document.submitted_at,
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
        return False
    if loaded is not None:
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
            set_committed_value(loaded, key, value)
    return True
