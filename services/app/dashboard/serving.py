"""What stands between a queue and its next run, other than the queue itself: no live worker
serving its tier, or its family's kill switch raised.

============================  ================================================================
the case                      what the dashboard says instead of a time
============================  ================================================================
no live worker for the tier   ``no worker serves this tier``: no worker whose heartbeat is
                              fresh (``SPEEDTIER_HEARTBEAT_TIMEOUT_SECONDS``) has published a
                              queue of the tier (``tiers.cancellation.live_workers``). When a
                              live worker has not published its queues (an older version),
                              nothing is claimed: the prediction stands.
the family's switch is on     ``paused by <switch> since <time> by <who>``, from the latest
                              pause in the audit (dashboard and CLI both write it); a switch
                              raised elsewhere (Rails, SQL) says ``since an unknown time``
============================  ================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import select

from services.app.bootstrap import Platform
from services.app.dashboard.prediction import Prediction
from shared.db.engine import session_scope
from shared.db.models.operator import OperatorAction
from tiers.cancellation import live_workers

NO_WORKER = "no worker serves this tier"


@dataclass
class Service:
    """The tiers some live worker serves, and the paused families with why."""

    served: set[str]
    unknown: bool  # a live worker did not say which queues it serves
    paused: dict[str, str] = field(default_factory=dict)  # family -> "paused by ..."

    def serves(self, tier: str) -> bool:
        return self.unknown or tier in self.served

    def note(self, family: str, tier: str) -> str:
        """What holds a queue of ``family`` in ``tier`` back ("" when nothing does)."""
        notes = [self.paused[family]] if family in self.paused else []
        if not self.serves(tier):
            notes.append(NO_WORKER)
        return "; ".join(notes)

    def honest(self, family: str, tier: str, prediction: Prediction) -> Prediction:
        """``prediction``, unless the family is paused or nothing serves the tier."""
        note = self.note(family, tier)
        return Prediction(None, note) if note else prediction


def service(platform: Platform) -> Service:
    served: set[str] = set()
    unknown = False
    timeout_ms = int(platform.settings.heartbeat_timeout_seconds * 1000)
    ns = platform.settings.redis_namespace
    for broker, tiers in platform.brokers.serving():
        workers, unpublished = live_workers(broker.client, ns, timeout_ms)
        served |= {tier for worker in workers for tier in worker.tiers if tier in tiers}
        unknown = unknown or unpublished > 0
    return Service(served, unknown, _paused(platform))


def _paused(platform: Platform) -> dict[str, str]:
    by_flag = platform.registry.pause_flags()
    raised = [flag for flag, on in platform.flags.states(by_flag).items() if on]
    if not raised:
        return {}
    latest: dict[str, OperatorAction] = {}
    with session_scope(platform.sessions) as session:
        rows = session.scalars(
            select(OperatorAction)
            .where(OperatorAction.target.in_(raised))
            .where(OperatorAction.action.in_(("pause", "resume")))
            .order_by(OperatorAction.id.desc())
            .limit(500)
        ).all()
        for action in rows:
            latest.setdefault(action.target, action)
        session.expunge_all()
    paused = {}
    for flag in raised:
        last = latest.get(flag)
        if last is not None and last.action == "pause":
            why = f"paused by {flag} since {last.at:%Y-%m-%d %H:%M:%S} UTC by {last.operator}"
        else:
            why = f"paused by {flag} since an unknown time (raised outside the dashboard and CLI)"
        for name in by_flag[flag]:
            paused[name] = why
    return paused
