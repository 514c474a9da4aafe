"""ENG-3000's bake in ``speedtier maintenance check``: 24 hours with no new
SummarizeConversationJob or expired-evaluation GoodJob row (real PostgreSQL, rolled back)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from services.maintenance import checks
from shared.db.base import utcnow
from shared.db.models import GoodJob


@pytest.fixture
def clean(session: Session) -> Session:
    session.execute(text("TRUNCATE good_jobs"))
    return session


def test_the_bake_passes_with_only_older_or_unrelated_rows(clean: Session) -> None:
    now = utcnow()
    clean.add(GoodJob(job_class="SummarizeConversationJob", created_at=now - timedelta(hours=25)))
    clean.add(GoodJob(job_class="CompleteConversationSyncJob", created_at=now))
    clean.flush()

    assert checks.summary_bake(clean).passed


@pytest.mark.parametrize(
    "fields",
    [
        {"job_class": "SummarizeConversationJob"},
        {"job_class": "SomeRailsJob", "cron_key": "mark_expired_evaluations_as_failed"},
        {"job_class": "X", "cron_key": "mark_expired_qa_evaluation_requests_as_failed"},
        {"job_class": "MarkExpiredEvaluationsAsFailedJob"},
    ],
)
def test_a_row_of_the_last_24_hours_fails_the_bake(clean: Session, fields: dict[str, str]) -> None:
    clean.add(GoodJob(created_at=utcnow() - timedelta(hours=20), **fields))
    clean.flush()

    result = checks.summary_bake(clean)

    assert not result.passed
    assert "in 24 h: 1 (expected 0)" in result.summary
    assert result.details[0].startswith(fields["job_class"])
