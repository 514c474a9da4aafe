"""What an operator changes from the dashboard, each recorded with who and when.

The change goes through the platform's own door (the job store's retry and discard scripts,
the cancel script of ``tiers.cancellation``, ``shared.flags``, the delivery-claim ledger's
own functions); the audit row (``shared.audit``) is written after it, with what the platform
answered. Were PostgreSQL down at that moment, a retry, discard or cancel still stands
(logged, not an error page) and the job's record names its operator (``retried_by``,
``discarded_by``, ``cancel_by``). A bulk action writes one row for the whole set, with its
count and the filter that chose it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from sqlalchemy import select

from services.app.bootstrap import Platform
from services.rails import delivery_claims
from shared import audit
from shared.db.engine import session_scope
from shared.db.models.operator import OperatorAction
from tiers.cancellation import request_cancel
from tiers.dead_letters import DeadLetters

#: What a bulk action's outcomes count as done.
BULK_DONE = {"retry": ("waiting", "parked"), "discard": ("discarded",)}


def record(
    platform: Platform, operator: str, action: str, target: str, outcome: str, detail: str = ""
) -> None:
    audit.record(platform.sessions, operator, action, target, outcome, detail)


def _letters(platform: Platform, job_id: str) -> DeadLetters:
    return DeadLetters(platform.brokers.broker_of_job(job_id).jobs)


def retry_job(platform: Platform, operator: str, job_id: str) -> str:
    outcome = _letters(platform, job_id).retry(job_id, operator)
    audit.record_after(platform.sessions, operator, "retry", job_id, outcome)
    return outcome


def discard_job(platform: Platform, operator: str, job_id: str) -> str:
    outcome = _letters(platform, job_id).discard(job_id, operator)
    audit.record_after(platform.sessions, operator, "discard", job_id, outcome)
    return outcome


def cancel_job(platform: Platform, operator: str, job_id: str) -> str:
    """Ask for a queued or running job to be cancelled (``tiers.cancellation``). Returns
    ``requested`` or why not (``already``, ``not_live``, ``no_job``)."""
    broker = platform.brokers.broker_of_job(job_id)
    ns = platform.settings.redis_namespace
    outcome = request_cancel(broker.client, ns, job_id, operator)
    audit.record_after(platform.sessions, operator, "cancel", job_id, outcome)
    return outcome


def bulk(
    platform: Platform, operator: str, action: str, job_ids: Iterable[str], chosen_by: str
) -> Counter[str]:
    """Retry or discard each of ``job_ids`` through the same scripts as one job's action;
    one audit row (``bulk-retry`` / ``bulk-discard``) with the count done, and each
    outcome's count in its detail. Returns outcome -> count."""
    one = retry_job_quietly if action == "retry" else discard_job_quietly
    outcomes: Counter[str] = Counter(one(platform, operator, job_id) for job_id in job_ids)
    done = sum(outcomes[o] for o in BULK_DONE[action])
    detail = ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items()))
    audit.record_after(
        platform.sessions, operator, f"bulk-{action}", chosen_by, f"{done} done", detail
    )
    return outcomes


def retry_job_quietly(platform: Platform, operator: str, job_id: str) -> str:
    return _letters(platform, job_id).retry(job_id, operator)


def discard_job_quietly(platform: Platform, operator: str, job_id: str) -> str:
    return _letters(platform, job_id).discard(job_id, operator)


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
