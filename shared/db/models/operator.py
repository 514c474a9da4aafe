"""The operators' audit: every action taken from the dashboard or the CLI, with who and
when (written through ``shared.audit``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Identity, Index, String, Text, func
from sqlalchemy.orm import Mapped, mapped_column

from shared.db.base import Api2Base, utcnow


class OperatorAction(Api2Base):
    """One action an operator took on the dashboard or with ``speedtier`` (retry, discard or
    cancel a job, a bulk retry or discard, raise or lower a kill switch, resolve a delivery
    claim, re-drive a tick), and how it ended.

    ``operator`` is the name given at sign-in, or ``cli:<user>``; ``target`` the job id, flag,
    claim or filter acted on; ``outcome`` what the platform answered (``waiting``,
    ``discarded``, ``requested``, ``paused``, ``10 done``).
    """

    __tablename__ = "operator_actions"
    __table_args__ = (Index("ix_operator_actions_target_at", "target", "at"),)

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), default=utcnow
    )
    operator: Mapped[str] = mapped_column(String(100))
    action: Mapped[str] = mapped_column(String(40))
    target: Mapped[str] = mapped_column(Text)
    outcome: Mapped[str] = mapped_column(String(40))
    detail: Mapped[str | None] = mapped_column(Text)
