"""Logging and Sentry set-up, and warnings with fingerprints."""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import IO, Any

from shared.errors import Delay, DeliveryLost, Paused, RecordMissing, Retryable

log = logging.getLogger("speedtier")

#: Outcomes that are part of normal operation, not errors worth an event: actors declare them
#: as Dramatiq ``throws`` (logged at info, not captured by Sentry's Dramatiq integration).
#: ``Unrecoverable`` and retried failures are real failures and are reported.
EXPECTED_OUTCOMES = (Delay, Paused, RecordMissing, DeliveryLost)
#: What actors declare as Dramatiq ``throws``: the expected outcomes plus ``Retryable``, a
#: classified failure the outcomes middleware retries and logs itself ("attempt N failed;
#: retrying"), so Dramatiq logs one info line for it, not an "unhandled exception"
#: traceback. Its last attempt is logged at ERROR by the outcomes middleware (and so still
#: reaches Sentry through its logging integration).
ACTOR_THROWS = (*EXPECTED_OUTCOMES, Retryable)


#: The job a thread is running (set by the worker's log-context middleware): job id, family,
#: organization, tier and attempt, added to every log record the thread emits meanwhile.
JOB_FIELDS = ("job_id", "family", "organization", "tier", "attempt")
current_job: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "speedtier_current_job", default=None
)

TEXT_FORMAT = "%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s%(job)s"


class JobContext(logging.Filter):
    """Copy the current job's fields onto each record (``record.job_id`` ...) and a short
    ``record.job`` suffix for readable lines (`` [job=... family=... org=...]``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        job = current_job.get()
        for name in JOB_FIELDS:
            setattr(record, name, job.get(name) if job else None)
        record.job = (
            " [" + " ".join(f"{k}={v}" for k, v in job.items() if v not in (None, "")) + "]"
            if job
            else ""
        )
        return True


class JsonLines(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, process,
    the job's fields when a job runs, and the traceback as ``exc_info`` text."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        for name in JOB_FIELDS:
            value = getattr(record, name, None)
            if value not in (None, ""):
                entry[name] = value
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


#: Control characters (C0, DEL, C1, Unicode's line and paragraph separators) as readable
#: escapes: a value that reaches a log line (a request path, a provider's answer) cannot
#: start a line of its own or drive a terminal. The backslash itself is doubled, so an
#: escape cannot be faked either.
_CONTROLS = (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)
_ESCAPES = {code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" for code in _CONTROLS} | {
    ord("\\"): "\\\\",
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
}


def escape_controls(text: str) -> str:
    """``text`` with backslashes doubled and every control character escaped."""
    return text.translate(_ESCAPES)


class EscapedText(logging.Formatter):
    """:data:`TEXT_FORMAT` lines (or ``fmt``'s) in which the message and the job fields are escaped
    (:func:`escape_controls`), so one record is one line; a traceback follows on lines of its
    own, each indented, so none of them reads as a record either."""

    def __init__(self, fmt: str = TEXT_FORMAT, datefmt: str | None = None) -> None:
        super().__init__(fmt, datefmt)

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_controls(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _indented(super().formatStack(stack_info))


def _indented(text: str) -> str:
    return "\n".join("    " + escape_controls(line) for line in text.splitlines())


def log_handler(*, json_lines: bool, stream: IO[str] | None = None) -> logging.Handler:
    """A stream handler (stderr by default) writing JSON lines or readable lines, with the
    job context filter."""
    handler = logging.StreamHandler(stream)
    handler.addFilter(JobContext())
    handler.setFormatter(JsonLines() if json_lines else EscapedText())
    return handler


def configure_logging(level: str, *, json_lines: bool = False) -> None:
    """Log to stderr at ``level``, as JSON lines (production) or readable lines; does nothing
    when the root logger already has a handler (a second bootstrap, pytest)."""
    logging.basicConfig(level=level, handlers=[log_handler(json_lines=json_lines)])


@contextlib.contextmanager
def job_logging(**fields: Any) -> Iterator[None]:
    """Within the block, this thread's log records carry ``fields`` (see :data:`JOB_FIELDS`)."""
    token = current_job.set(fields)
    try:
        yield
    finally:
        current_job.reset(token)


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
    import sentry_sdk
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


def _sentry() -> Any:
    """The Sentry SDK when something loaded it (``init_sentry``, a test's own client), else
    None: without it nothing can have been initialised, so every report would be a no-op.
    Importing it lazily keeps it (and the HTTP stack it pulls in, ~11 MiB) out of workers
    that run without a DSN."""
    return sys.modules.get("sentry_sdk")


def warn(message: str, *, fingerprint: list[str], **extra: Any) -> None:
    """Log a warning and report it to Sentry as a warning grouped by ``fingerprint``
    (the seeds' "reports to Sentry as a warning")."""
    log.warning("%s %s", message, extra or "")
    sentry_sdk = _sentry()
    if sentry_sdk is None:
        return
    with sentry_sdk.new_scope() as scope:
        scope.fingerprint = fingerprint
        for key, value in extra.items():
            scope.set_extra(key, value)
        sentry_sdk.capture_message(message, level="warning")


def report_exception(
    error: BaseException, *, fingerprint: list[str], tags: Mapping[str, Any] | None = None
) -> None:
    """Capture ``error`` in Sentry grouped by ``fingerprint`` with ``tags`` (a no-op when
    Sentry was never loaded)."""
    sentry_sdk = _sentry()
    if sentry_sdk is None:
        return
    with sentry_sdk.new_scope() as scope:
        scope.fingerprint = fingerprint
        for key, value in (tags or {}).items():
            scope.set_tag(key, value)
        sentry_sdk.capture_exception(error)


def tag_current_scope(**tags: Any) -> None:
    """Tag what Sentry reports for the running job (its Dramatiq integration captures the
    job's failure); a no-op when Sentry was never loaded."""
    sentry_sdk = _sentry()
    if sentry_sdk is None:
        return
    for key, value in tags.items():
        sentry_sdk.set_tag(key, value)


def send_checkin(**checkin: Any) -> None:
    """Send a Sentry cron check-in (``sentry_sdk.crons.capture_checkin`` with ``checkin``);
    a no-op when Sentry was never loaded. A check-in that cannot be sent is only logged."""
    sentry_sdk = _sentry()
    if sentry_sdk is None:
        return
    from sentry_sdk.crons import capture_checkin

    try:
        capture_checkin(**checkin)
    except Exception:  # a monitoring side channel never fails the tick
        log.exception("sentry check-in %s not sent", checkin.get("monitor_slug"))
