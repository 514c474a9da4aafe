"""Rails tables conversation uploads read and write (delivery ledger, attachments, identities).

Reserved in the revision chain so that work in progress on several branches of the code
does not fork Alembic's history; the owner of this revision fills it in.

Revision ID: rails_0004
Revises: rails_0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

revision: str = "rails_0004"
down_revision: str | Sequence[str] | None = "rails_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
