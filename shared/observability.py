"""Logging and Sentry set-up, and warnings with fingerprints."""

from __future__ import annotations

import logging
from typing import Any

import sentry_sdk

from shared.errors import Delay, Paused, RecordMissing

log = logging.getLogger("speedtier")

#: Outcomes that are part of normal operation, not errors worth an event: actors declare them
#: as Dramatiq ``throws`` (logged at info, not captured by Sentry's Dramatiq integration).
#: ``Unrecoverable`` and retried failures are real failures and are reported.
EXPECTED_OUTCOMES = (Delay, Paused, RecordMissing)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s",
    )


def _drop_expected(event: Any, hint: dict[str, Any]) -> Any:
    exc_info = hint.get("exc_info")
    error = exc_info[1] if exc_info else None
    error = getattr(error, "outcome", error)  # unwrap an outcome held by a middleware
    if isinstance(error, EXPECTED_OUTCOMES):
        return None
    return event


def init_sentry(dsn: str | None, *, environment: str, component: str) -> bool:
    """Start Sentry with its Dramatiq and Flask integrations when a DSN is configured.

    Must run before the broker is built (the Dramatiq integration patches the broker).
    Returns whether Sentry was started; without a DSN nothing changes.
    """
    if not dsn:
        return False
    from sentry_sdk.integrations.dramatiq import DramatiqIntegration
    from sentry_sdk.integrations.flask import FlaskIntegration

    sentry_sdk.init(
        dsn=dsn,
        environment=environment,
        integrations=[DramatiqIntegration(), FlaskIntegration()],
        before_send=_drop_expected,
        server_name=component,
    )
    return True


def warn(message: str, *, fingerprint: list[str], **extra: Any) -> None:
    """Log a warning and report it to Sentry as a warning grouped by ``fingerprint``
    (the seeds' "reports to Sentry as a warning")."""
    log.warning("%s %s", message, extra or "")
    with sentry_sdk.new_scope() as scope:
        scope.fingerprint = fingerprint
        for key, value in extra.items():
            scope.set_extra(key, value)
        sentry_sdk.capture_message(message, level="warning")
