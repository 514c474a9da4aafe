"""A source listing read page by page that survives its provider's rate limit.

A provider implementing ``ResumableListing`` (Zendesk) lists a source as pages, each with a
checkpoint that resumes after it. The source sync applies the pages as they come; when one
raises ``Delay`` (the account's per-minute budget is spent), the pages applied so far are
committed and the ``Delay`` is re-raised carrying the job's checkpoint (``st_ckpt``: the
pass's start time, the provider's checkpoint, and whether every page so far was complete).
The delayed job resumes there instead of starting over, so a help center bigger than the
budget finishes; the platform counts a delay that carries a new checkpoint as progress, not
toward the limit on consecutive delays (``tiers/middleware/outcomes.py``).

Removal stays snapshot-safe: only when the last page has been read, and every page of the
pass was complete, are the source's documents and sections the pass did not touch
(``updated_at`` before the pass began) discarded. A failure other than ``Delay`` rolls
back the current delivery's pages; a retry resumes from the last committed checkpoint.
A checkpoint older than :data:`MAX_PASS_AGE` (or of another source) starts a fresh pass.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from services.connectors.base import ListingPart, ResumableListing, SourceConfig
from services.knowledge_sync import store
from shared.db.models.rails import KnowledgeBaseDocument, KnowledgeBaseSource
from shared.errors import Delay
from tiers.attempts import current_checkpoint
from tiers.options import CHECKPOINT

#: A pass resumed after this long starts over (its "untouched since" would be stale).
MAX_PASS_AGE = timedelta(days=1)


@dataclass(frozen=True)
class PassCheckpoint:
    """Where a source's listing pass stands, as it rides on the delayed job."""

    source_id: int
    started: datetime
    resume: str | None
    complete: bool

    def dumps(self) -> str:
        return json.dumps(
            {
                "source": self.source_id,
                "started": self.started.isoformat(),
                "resume": self.resume,
                "complete": self.complete,
            },
            separators=(",", ":"),
        )

    @classmethod
    def current(cls, source_id: int, now: datetime) -> PassCheckpoint:
        """The running job's pass for ``source_id``, or a fresh one starting ``now``."""
        fresh = cls(source_id, now, None, True)
        try:
            raw = json.loads(current_checkpoint() or "null")
            started = datetime.fromisoformat(raw["started"]) if isinstance(raw, dict) else None
        except (ValueError, KeyError, TypeError):
            return fresh
        if (
            started is None
            or raw.get("source") != source_id
            or started.tzinfo is None
            or not started <= now < started + MAX_PASS_AGE
        ):
            return fresh
        resume = raw.get("resume")
        return cls(
            source_id,
            started,
            resume if isinstance(resume, str) else None,
            bool(raw.get("complete", False)),
        )


def run_resumable_listing(
    session: Session,
    provider: ResumableListing,
    config: SourceConfig,
    *,
    organization_id: int,
    source: KnowledgeBaseSource,
    now: datetime,
    apply: Callable[[ListingPart, datetime], None],
) -> tuple[datetime, bool]:
    """Read the source's listing from the job's checkpoint, applying each page with
    ``apply(part, pass started)``; returns ``(pass started, every page complete)`` once the
    last page is read.

    Raises:
      Delay: a page must wait; the pages read so far are committed and the delay carries
        the checkpoint after them.
    """
    state = PassCheckpoint.current(source.id, now)
    complete, resume = state.complete, state.resume
    try:
        for part, after in provider.list_pages(config, resume):
            apply(part, state.started)
            complete = complete and part.complete
            resume = after
    except Delay as delay:
        if resume == state.resume:
            raise  # nothing new to keep: the job's own checkpoint still holds
        session.commit()
        checkpoint = PassCheckpoint(source.id, state.started, resume, complete).dumps()
        raise Delay(
            delay.until,
            reason=delay.reason,
            carry={**delay.carry, CHECKPOINT: checkpoint},
            source=delay.source,
        ) from delay
    return state.started, complete


def discard_untouched(
    session: Session,
    organization_id: int,
    source: KnowledgeBaseSource,
    started: datetime,
    now: datetime,
    discard: Callable[[KnowledgeBaseDocument], None],
) -> None:
    """After a complete pass: discard the documents and sections it did not touch."""
    for row in store.documents_of_source(session, organization_id, source.id).values():
        if row.discarded_at is None and row.updated_at < started:
            discard(row)
    store.discard_sections_before(session, organization_id, source.id, started, now)
