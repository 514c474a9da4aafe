"""Tables this project owns, all in schema ``api2``."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Identity, Index, Integer, String, Text, func
from sqlalchemy.orm import Mapped, mapped_column

from shared.db.base import Api2Base, utcnow


class KnowledgeBaseCrawlTaskUrl(Api2Base):
    """The crawl ledger: one row per URL claimed by a crawl task.

    The claim (insert) commits together with the task's ``urls_pending`` increment, and
    ``finished_at`` together with the decrement, so a retried URL job can tell "claimed",
    "finished" and "never seen" apart. ``crawl_task_id`` refers to
    ``public.knowledge_base_crawl_tasks`` without a foreign key: that table belongs to Rails,
    and this schema must migrate on a database that does not have it. The unique index leads
    with ``organization_id``, which also serves tenant lookups.
    """

    __tablename__ = "knowledge_base_crawl_task_urls"
    __table_args__ = (
        Index(
            "uq_knowledge_base_crawl_task_urls_org_task_url",
            "organization_id",
            "crawl_task_id",
            "url",
            unique=True,
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    organization_id: Mapped[int] = mapped_column(BigInteger)
    crawl_task_id: Mapped[int] = mapped_column(BigInteger)
    url: Mapped[str] = mapped_column(Text)
    url_hash: Mapped[str] = mapped_column(String(64))
    parent_url: Mapped[str | None] = mapped_column(Text)
    depth: Mapped[int] = mapped_column(Integer)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), default=utcnow
    )
