"""Transaction-scoped advisory locks: a document's writers, and adding a document by name."""

from __future__ import annotations

import hashlib

from sqlalchemy import text
from sqlalchemy.orm import Session


def _lock_key(*parts: object) -> int:
    name = ":".join(str(part) for part in parts)
    digest = hashlib.blake2b(name.encode(), digest_size=8, person=b"kb-ingestion").digest()
    return int.from_bytes(digest, "big", signed=True)


def _hold(session: Session, key: int) -> None:
    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


def lock_document(session: Session, organization_id: int, document_id: int) -> None:
    """Hold the document's advisory lock until the transaction ends."""
    _hold(session, _lock_key("document", organization_id, document_id))


def lock_document_name(
    session: Session, organization_id: int, knowledge_base_id: int, name: str
) -> None:
    """Hold the lock on a document name in a base until the transaction ends, so two
    uploads of one name cannot both create it."""
    _hold(session, _lock_key("name", organization_id, knowledge_base_id, name))
