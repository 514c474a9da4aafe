"""A super-source connection's secrets, sealed with the platform's credentials key ring.

``shared.credentials.CredentialBox`` (``SPEEDTIER_CONNECTOR_CREDENTIALS_KEY``), the same
keys as knowledge-base connections:

==============================  ============================================================
row holds                       read as
==============================  ============================================================
``sealed_credentials``          the object it opens to (the plain column is ignored)
only plain ``credentials``      the plain object: a row a peer wrote plain (a previous
                                release during a rolling deploy, Rails); ``seal_plain``
                                (``speedtier super seal-credentials``) seals it
neither                         ``{}``
==============================  ============================================================

The webhook secret follows the same rule (``sealed_webhook_secret``, then ``webhook_secret``).
A sealed value no configured key opens raises ``CredentialsUnreadable`` (unrecoverable).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from shared.credentials import CredentialBox
from shared.db.models.super_sources import SuperSourceConnection


def credentials_of(row: SuperSourceConnection, box: CredentialBox) -> dict[str, Any]:
    """The connection's credentials, opened or (a row written plain) as stored."""
    if row.sealed_credentials is not None:
        opened = box.open_value(row.sealed_credentials)
        return dict(opened) if isinstance(opened, dict) else {}
    return dict(row.credentials or {})


def webhook_secret_of(row: SuperSourceConnection, box: CredentialBox) -> str | None:
    """The secret the connection's webhook signatures are made with, or None."""
    if row.sealed_webhook_secret is not None:
        return str(box.open_value(row.sealed_webhook_secret)) or None
    return row.webhook_secret or None


def has_webhook_secret(row: SuperSourceConnection) -> bool:
    return row.sealed_webhook_secret is not None or bool(row.webhook_secret)


def seal_into(
    row: SuperSourceConnection,
    box: CredentialBox,
    *,
    credentials: dict[str, Any] | None,
    webhook_secret: str | None,
) -> None:
    """Seal ``credentials`` and ``webhook_secret`` into ``row``, leaving no plain copy.

    Raises:
      CredentialsKeyMissing: a secret to store and no key configured.
    """
    row.sealed_credentials = box.seal_value(credentials) if credentials else None
    row.credentials = {}
    row.sealed_webhook_secret = box.seal_value(webhook_secret) if webhook_secret else None
    row.webhook_secret = None


def seal_plain(rows: Iterable[SuperSourceConnection], box: CredentialBox) -> int:
    """Seal the plain secrets of ``rows`` (``store.plain_secret_connections``); how many.

    Raises:
      CredentialsKeyMissing: a row to seal and no key configured.
    """
    count = 0
    for row in rows:
        seal_into(
            row,
            box,
            credentials=credentials_of(row, box),
            webhook_secret=webhook_secret_of(row, box),
        )
        count += 1
    return count
