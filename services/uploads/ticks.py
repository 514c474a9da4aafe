"""The 30-minute conversation-upload scan (``*/30 * * * *``), paused by
``pause_api2_conversation_upload_checks``.

Routing of each candidate (:func:`services.uploads.store.scan_candidates`):

| candidate | goes to |
| --- | --- |
| presign, pending | ``conversation-upload-check-<id>`` (Rails: blob_key lookup, 30-minute expiry) |
| direct, pending, file present, older than 5 minutes | ``conversation-upload-process-<id>`` |
| direct, pending, file present, younger | nothing yet (the controller's hand-off is due) |
| direct, pending, no file | nothing: left for the delivery reconciler, never expired |
| direct, failed (retries left) or stuck, file present | the same, ``periodic`` |

Direct uploads never go through check. The summary (kept on the tick's job record) counts
the enqueue outcomes plus ``skippedDirect`` and ``graceDirect``. The delivery-ledger
reconciler runs in the same tick, after the scan.

The scan imports the store and the reconciler (and with them the ORM models) when it runs:
a worker registers this tick without loading the models (``router.deferred``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from router.enqueue import Router, enqueue_settled
from router.requests import JobRequest
from router.ticks import Tick
from services.uploads.families import PAUSE_FLAG, check_request, process_request
from shared.db.engine import session_scope
from tiers.job_state import JobState, NotInAJob
from tiers.job_store import JobStore

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from services.uploads import store

log = logging.getLogger(__name__)

TICK_NAME = "conversation-upload-checks"
#: The controller enqueues its own hand-off; the scan waits this long before doing it.
CONTROLLER_GRACE = timedelta(minutes=5)


def route(candidates: list[store.Candidate], now: Any) -> tuple[list[JobRequest], dict[str, int]]:
    """The jobs the candidates become, and the direct uploads left alone (counts)."""
    requests: list[JobRequest] = []
    skipped = {"skippedDirect": 0, "graceDirect": 0}
    for upload in candidates:
        if upload.upload_type != "direct":
            if upload.status == "pending":
                requests.append(check_request(upload.organization_id, upload.upload_id))
            continue
        if not upload.has_file:
            skipped["skippedDirect"] += 1
        elif upload.status != "pending":
            requests.append(
                process_request(upload.organization_id, upload.upload_id, periodic=True)
            )
        elif upload.created_at > now - CONTROLLER_GRACE:
            skipped["graceDirect"] += 1
        else:
            requests.append(process_request(upload.organization_id, upload.upload_id))
    return requests, skipped


def last_due_slot(now: datetime) -> datetime:
    """The latest ``*/30`` fire time at or before ``now`` (UTC)."""
    moment = now.astimezone(UTC)
    return moment.replace(minute=moment.minute - moment.minute % 30, second=0, microsecond=0)


def upload_scan_tick(
    sessions: sessionmaker[Session],
    router: Router,
    job_state: Callable[[str], str | None],
    jobs: JobStore | None = None,
) -> Tick:
    """The scan, then the ledger reconciler (:mod:`services.uploads.reconciler`); the
    reconciler's counts appear in the summary as ``ledger_<what>``, their total (0 included)
    as ``ledger_reconciled``. With ``jobs`` (the
    maintenance tier's store) the summary is kept on the tick's job record as
    ``data:summary`` (``speedtier jobs show conversation-upload-checks-tick-<slot>``)."""

    def run(slot: str) -> dict[str, int]:
        from services.uploads import store
        from services.uploads.reconciler import reconcile
        from shared.db.base import utcnow

        now = utcnow()
        with session_scope(sessions) as session:
            candidates = store.scan_candidates(session, now)
        requests, skipped = route(candidates, now)
        summary = {**enqueue_settled(router, requests).summary(), **skipped}
        settled = reconcile(sessions, router, job_state, utcnow())
        summary["ledger_reconciled"] = sum(settled.values())
        summary.update({f"ledger_{what}": count for what, count in settled.items()})
        if jobs is not None:
            with contextlib.suppress(NotInAJob):  # a manual CLI run prints it instead
                JobState.current(jobs).set(summary=summary)
        log.info("%s %s: %s", TICK_NAME, slot, summary)
        return summary

    return Tick(
        name=TICK_NAME,
        cron="*/30 * * * *",
        run=run,
        description="route pending and retry-due conversation uploads to check/process jobs",
        pause_flag=PAUSE_FLAG,
    )
