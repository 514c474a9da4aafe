"""Transaction-scoped advisory locks: a document's writers, and adding a document by name."""

from __future__ import annotations

import hashlib

from sqlalchemy.orm import Session

from shared.db.driver import driver_execute

_LOCK = "SELECT pg_advisory_xact_lock(%s)"


def _lock_key(*parts: object) -> int:
    name = ":".join(str(part) for part in parts)
    digest = hashlib.blake2b(name.encode(), digest_size=8, person=b"kb-ingestion").digest()
    return int.from_bytes(digest, "big", signed=True)


def _hold(session: Session, key: int) -> None:
    """Take the lock in the session's transaction, on its psycopg connection: every
    ingestion pass and upload takes one, and the driver prepares this fixed statement once
    per connection where SQLAlchemy would build and bind it each time."""
    driver_execute(session, _LOCK, (key,))


def lock_document(session: Session, organization_id: int, document_id: int) -> None:
    """Hold the document's advisory lock until the transaction ends."""
    _hold(session, _lock_key("document", organization_id, document_id))


def lock_document_name(
    session: Session, organization_id: int, knowledge_base_id: int, name: str
) -> None:
    """Hold the lock on a document name in a base until the transaction ends, so two
    uploads of one name cannot both create it."""
    _hold(session, _lock_key("name", organization_id, knowledge_base_id, name))
