"""What an operator changes from the dashboard, each recorded with who and when.

The change goes through the platform's own door (the job store's retry and discard scripts,
``shared.flags``, the delivery-claim ledger's own functions); the audit row
(``api2.operator_actions``) is written after it, with what the platform answered. Were
PostgreSQL down at that moment, a retry or discard still stands (logged, not an error page)
and the job's record names its operator (``retried_by``, ``discarded_by``).
"""

from __future__ import annotations

import logging

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from services.app.bootstrap import Platform
from services.rails import delivery_claims
from shared.db.engine import session_scope
from shared.db.models.operator import OperatorAction
from tiers.dead_letters import DeadLetters

log = logging.getLogger(__name__)


def record(
    platform: Platform, operator: str, action: str, target: str, outcome: str, detail: str = ""
) -> None:
    with session_scope(platform.sessions) as session:
        session.add(
            OperatorAction(
                operator=operator,
                action=action,
                target=target[:500],
                outcome=outcome,
                detail=detail or None,
            )
        )
        session.commit()


def _record_after_redis(
    platform: Platform, operator: str, action: str, job_id: str, outcome: str
) -> None:
    """The audit row of a job action already done in Redis: PostgreSQL being down must not
    turn it into an error page (the operator would try again); the job record names them."""
    try:
        record(platform, operator, action, job_id, outcome)
    except SQLAlchemyError as exc:
        log.warning("audit of %s %s by %s not written (%s)", action, job_id, operator, exc)


def retry_job(platform: Platform, operator: str, job_id: str) -> str:
    outcome = DeadLetters(platform.brokers.broker_of_job(job_id).jobs).retry(job_id, operator)
    _record_after_redis(platform, operator, "retry", job_id, outcome)
    return outcome


def discard_job(platform: Platform, operator: str, job_id: str) -> str:
    outcome = DeadLetters(platform.brokers.broker_of_job(job_id).jobs).discard(job_id, operator)
    _record_after_redis(platform, operator, "discard", job_id, outcome)
    return outcome


def set_switch(platform: Platform, operator: str, flag: str, paused: bool) -> str:
    platform.flags.set(flag, paused)
    outcome = "paused" if paused else "resumed"
    record(platform, operator, "pause" if paused else "resume", flag, outcome)
    return outcome


def recent(platform: Platform, limit: int = 100) -> list[OperatorAction]:
    with session_scope(platform.sessions) as session:
        rows = session.scalars(
            select(OperatorAction).order_by(OperatorAction.id.desc()).limit(limit)
        ).all()
        session.expunge_all()
        return list(rows)


def resolve_claim(platform: Platform, operator: str, key: str, delivered: bool) -> str:
    """Resolve an uncertain delivery claim by hand (the seed's runbook): ``delivered`` marks
    it sent (never sent again), otherwise it is released (the next attempt sends again).
    Returns ``marked`` / ``released``, or ``not_unresolved`` when no unresolved claim of
    ``key`` exists (resolved or released meanwhile)."""
    if delivered:
        done = delivery_claims.mark_delivered(platform.sessions, key)
        outcome = "marked" if done else "not_unresolved"
    else:
        done = delivery_claims.release(platform.sessions, key)
        outcome = "released" if done else "not_unresolved"
    record(platform, operator, "claim-delivered" if delivered else "claim-release", key, outcome)
    return outcome
