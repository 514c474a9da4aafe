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


#: Errors that are Dramatiq's mechanics, not the project's: a before-run middleware's way to
#: hand an outcome (itself a SpeedtierError) to the outcomes middleware.
MECHANICS = {"tiers.middleware.held.Held"}


def test_every_error_the_project_defines_is_a_speedtier_error() -> None:
    import importlib
    import inspect
    import pkgutil

    found = []
    for root in ("shared", "tiers", "router", "services"):
        package = importlib.import_module(root)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{root}."):
            if ".migrations." in info.name:
                continue
            module = importlib.import_module(info.name)
            for _, value in inspect.getmembers(module, inspect.isclass):
                if value.__module__ == info.name and issubclass(value, BaseException):
                    found.append(value)
    strays = [
        f"{error.__module__}.{error.__qualname__}"
        for error in found
        if not issubclass(error, SpeedtierError)
        and f"{error.__module__}.{error.__qualname__}" not in MECHANICS
    ]
    assert len(found) > 20
    assert strays == []
