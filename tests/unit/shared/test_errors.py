"""One root for every error the project defines (no I/O)."""

from __future__ import annotations

import pytest

from services.connectors.base import LeaveUntouched
from services.ingestion import store
from services.web.failures import FetchFailed
from services.web.robots import Disallowed
from shared.errors import (
    Delay,
    JobError,
    Paused,
    QueueUnavailable,
    RecordMissing,
    Retryable,
    SpeedtierError,
    Unrecoverable,
    ValidationFailed,
)


@pytest.mark.parametrize(
    "error",
    [
        RecordMissing("gone"),
        Unrecoverable("bad credentials"),
        Retryable("503"),
        Delay(0.0, "window"),
        Paused("pause_api2_x"),
        ValidationFailed({"name": "required"}),
        QueueUnavailable("redis down"),
        store.DocumentBusy("document 1 is being ingested"),
        store.DocumentTooLarge("content over 10 MB"),
        Disallowed("https://example.com/private"),
        FetchFailed("unreachable or redirecting URL"),
        LeaveUntouched(),
    ],
)
def test_every_project_error_is_a_speedtier_error(error: Exception) -> None:
    assert isinstance(error, SpeedtierError)


def test_only_job_outcomes_are_job_errors() -> None:
    # The outcomes middleware classifies JobError; a request or queue error is not a job's.
    assert not isinstance(ValidationFailed({}), JobError)
    assert not isinstance(QueueUnavailable(), JobError)
    assert not isinstance(store.DocumentTooLarge(), JobError)
    # robots.txt refusing a URL finishes it without content; it is not a job failure.
    assert not isinstance(Disallowed("https://example.com/"), JobError)
