"""Organizations' API keys for the public ingestion routes, stored as SHA-256 only."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.ingestion.store.names import checked_name
from shared.db.base import utcnow
from shared.db.models.ingestion import IngestionApiKey
from shared.db.tenant import select_scoped
from shared.errors import RecordMissing

API_KEY_PREFIX = "stk_"


def hash_api_key(plain_key: str) -> str:
    """SHA-256 (hex) of a key: keys are random, so a fast hash is enough to store them."""
    return hashlib.sha256(plain_key.encode()).hexdigest()


def create_api_key(
    session: Session, *, organization_id: int, name: str, now: datetime | None = None
) -> tuple[IngestionApiKey, str]:
    """A new key for the organization: the row (hash only) and the plain key, which is
    returned this once and stored nowhere."""
    plain = API_KEY_PREFIX + secrets.token_urlsafe(32)
    key = IngestionApiKey(
        organization_id=organization_id,
        name=checked_name(name),
        key_hash=hash_api_key(plain),
        created_at=now or utcnow(),
    )
    session.add(key)
    session.flush()
    return key, plain


def revoke_api_key(
    session: Session, *, organization_id: int, key_id: int, now: datetime | None = None
) -> None:
    """Revoke a key of the organization (idempotent). Raises RecordMissing."""
    key = session.execute(
        select_scoped(IngestionApiKey, organization_id=organization_id).where(
            IngestionApiKey.id == key_id
        )
    ).scalar_one_or_none()
    if key is None:
        raise RecordMissing(f"API key {key_id} not found")
    if key.revoked_at is None:
        key.revoked_at = now or utcnow()


def organization_for_key(session: Session, plain_key: str) -> int | None:
    """The organization a live (unrevoked) key belongs to, else None."""
    if not plain_key:
        return None
    return session.scalar(
        select(IngestionApiKey.organization_id).where(
            IngestionApiKey.key_hash == hash_api_key(plain_key),
            IngestionApiKey.revoked_at.is_(None),
        )
    )
