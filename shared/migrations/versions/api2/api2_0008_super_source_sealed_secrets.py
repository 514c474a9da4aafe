"""Super-source connections' secrets sealed with the credentials key ring.

* ``super_source_connections.sealed_credentials`` and ``.sealed_webhook_secret`` (``bytea``):
  Fernet tokens under ``SPEEDTIER_CONNECTOR_CREDENTIALS_KEY`` (``shared.credentials``), the
  keys knowledge-base connections are sealed with.
* Every existing row's plain ``credentials`` and ``webhook_secret`` are sealed into them and
  cleared (``'{}'`` and NULL), in this migration's transaction. Without a key configured
  (development only: production and staging refuse to start without one) the rows are left
  plain, the readers still take them, and ``speedtier super seal-credentials`` seals them
  once a key is set.

Downgrade opens the sealed values back into the plain columns (it needs the key) and drops
the two columns.

Revision ID: api2_0008
Revises: api2_0007
Create Date: 2026-12-06
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from shared.credentials import SETTING, CredentialBox

revision: str = "api2_0008"
down_revision: str | Sequence[str] | None = "api2_0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "api2"
TABLE = f"{SCHEMA}.super_source_connections"
log = logging.getLogger("alembic.runtime.migration")


def _box() -> CredentialBox:
    return CredentialBox.from_setting(os.environ.get(SETTING) or None)


def upgrade() -> None:
    op.add_column(
        "super_source_connections",
        sa.Column("sealed_credentials", sa.LargeBinary(), nullable=True),
        schema=SCHEMA,
    )
    op.add_column(
        "super_source_connections",
        sa.Column("sealed_webhook_secret", sa.LargeBinary(), nullable=True),
        schema=SCHEMA,
    )
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            f"SELECT id, credentials, webhook_secret FROM {TABLE} "
            "WHERE credentials <> '{}'::jsonb OR webhook_secret IS NOT NULL FOR UPDATE"
        )
    ).all()
    if not rows:
        return
    box = _box()
    if not box.configured:
        log.warning(
            "%d super-source connection(s) keep plain secrets: %s is not set; run "
            "`speedtier super seal-credentials` once it is",
            len(rows),
            SETTING,
        )
        return
    for row_id, credentials, webhook_secret in rows:
        bind.execute(
            sa.text(
                f"UPDATE {TABLE} SET sealed_credentials = :credentials, "
                "sealed_webhook_secret = :secret, credentials = '{}'::jsonb, "
                "webhook_secret = NULL WHERE id = :id"
            ),
            {
                "id": row_id,
                "credentials": box.seal_value(credentials) if credentials else None,
                "secret": box.seal_value(webhook_secret) if webhook_secret else None,
            },
        )


def downgrade() -> None:
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            f"SELECT id, sealed_credentials, sealed_webhook_secret FROM {TABLE} "
            "WHERE sealed_credentials IS NOT NULL OR sealed_webhook_secret IS NOT NULL"
        )
    ).all()
    box = _box()
    for row_id, sealed_credentials, sealed_secret in rows:
        bind.execute(
            sa.text(
                f"UPDATE {TABLE} SET credentials = CAST(:credentials AS jsonb), "
                "webhook_secret = :secret WHERE id = :id"
            ),
            {
                "id": row_id,
                "credentials": json.dumps(
                    box.open_value(sealed_credentials) if sealed_credentials else {}
                ),
                "secret": box.open_value(sealed_secret) if sealed_secret else None,
            },
        )
    op.drop_column("super_source_connections", "sealed_webhook_secret", schema=SCHEMA)
    op.drop_column("super_source_connections", "sealed_credentials", schema=SCHEMA)
