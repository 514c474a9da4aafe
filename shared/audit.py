"""The operators' audit (``api2.operator_actions``): one row per action an operator takes,
from the dashboard or the ``speedtier`` command, with who, what, on what and how it ended.

The dashboard records the name given at sign-in; a command records ``cli:<user>``, the
operating-system user running it (:func:`cli_operator`). Both write the same rows, so the
dashboard's Audit page lists pauses, retries, cancels and re-drives however they were made.
"""

from __future__ import annotations

import getpass
import logging

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from shared.db.engine import session_scope
from shared.db.models.operator import OperatorAction

log = logging.getLogger(__name__)


def cli_operator() -> str:
    """Who runs this command: ``cli:<operating-system user>``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for the uid (a container)
        user = "unknown"
    return f"cli:{user}"


def record(
    sessions: sessionmaker[Session],
    operator: str,
    action: str,
    target: str,
    outcome: str,
    detail: str = "",
) -> None:
    """Write one audit row (committed)."""
    with session_scope(sessions) as session:
        session.add(
            OperatorAction(
                operator=operator[:100],
                action=action[:40],
                target=target[:500],
                outcome=outcome[:40],
                detail=detail or None,
            )
        )
        session.commit()


def record_after(
    sessions: sessionmaker[Session],
    operator: str,
    action: str,
    target: str,
    outcome: str,
    detail: str = "",
) -> None:
    """The audit row of an action already done in Redis: PostgreSQL being down must not
    turn it into an error (the operator would do it again); it is logged instead."""
    try:
        record(sessions, operator, action, target, outcome, detail)
    except SQLAlchemyError as exc:
        log.warning("audit of %s %s by %s not written (%s)", action, target, operator, exc)
