"""A document as an ingestion pass reads it: the columns the pass decides on and its source
bytes, in one fixed statement, as a plain value rather than an ORM instance.

Every pass starts with this read. It runs on the session's own psycopg connection
(:func:`shared.db.driver.driver_execute`), in its transaction: the driver prepares the fixed
text after a few runs, so the server plans it once per connection, and the client builds
no SQL, no ORM instance and no identity-map entry per document (an ORM select of the
document cost about 0.5 ms of the worker's CPU, measured). The row comes in binary, so the
source arrives as its bytes, not as hex text twice their size that the server encodes and
the client decodes. A pass that must change the document beyond what
:func:`~services.ingestion.store.indexed.mark_indexed` writes (fail it, mark it unchanged,
store a fetched page) takes its lock and reads it again as an ORM instance
(:func:`~services.ingestion.store.documents.get_document`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from services.ingestion.store import documents
from shared.db.base import API2_SCHEMA
from shared.db.driver import driver_execute
from shared.db.models.ingestion import KbDocument
from shared.errors import RecordMissing


@dataclass(frozen=True)
class DocumentState:
    """The document's columns a pass decides on, as one statement read them.

    ``submitted_at`` names the submission the pass works on: the pass writes only while it
    is still the document's (:func:`~services.ingestion.store.indexed.mark_indexed` checks
    it in the statement that writes).
    """

    id: int
    organization_id: int
    knowledge_base_id: int
    kind: str
    status: str
    failure_reason: str | None
    content_type: str | None
    filename: str | None
    url: str | None
    crawl_depth: int
    connector: str | None
    audience: list[str]
    content_hash: str | None
    index_fingerprint: str | None
    current_version: int
    submitted_at: datetime
    submission_cause: str


_COLUMNS = tuple(DocumentState.__dataclass_fields__)
#: The state, the source's size and its first slice of ``%(slice)s`` bytes.
READ_STATEMENT = (
    f"SELECT {', '.join(_COLUMNS)}, octet_length(source_bytes), "
    "substring(source_bytes FROM 1 FOR %(slice)s) "
    f"FROM {API2_SCHEMA}.{KbDocument.__tablename__} "
    "WHERE organization_id = %(organization_id)s AND id = %(document_id)s "
    "AND deleted_at IS NULL"
)


class DocumentRead:
    """A document as one statement read it, with its stored source bytes, which the first
    :meth:`take_source` hands over and lets go of (a large source is not kept alive by
    whoever holds this)."""

    def __init__(self, document: DocumentState, source: bytes | None) -> None:
        self.document = document
        self._source = source

    def take_source(self) -> bytes | None:
        """The source bytes (None: none stored), once; this keeps no reference to them."""
        source, self._source = self._source, None
        return source


def read_document(session: Session, *, organization_id: int, document_id: int) -> DocumentRead:
    """The live document's state and its source bytes, in one round trip for a source that
    fits in :data:`~services.ingestion.store.documents.SOURCE_READ_SLICE` (the rest, if
    any, is read a slice at a time, as
    :func:`~services.ingestion.store.documents.read_source` does).

    Raises:
      RecordMissing: missing, deleted or another tenant's.
    """
    row = driver_execute(
        session,
        READ_STATEMENT,
        {
            "organization_id": organization_id,
            "document_id": document_id,
            "slice": documents.SOURCE_READ_SLICE,
        },
        binary=True,
    )
    if row is None:
        raise RecordMissing(f"document {document_id} not found")
    state = DocumentState(*row[: len(_COLUMNS)])
    size, head = row[len(_COLUMNS) :]
    source = None
    if size is not None:
        source = documents.rest_of_source(session, organization_id, document_id, size, head)
    return DocumentRead(state, source)
