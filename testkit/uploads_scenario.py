"""Conversation uploads end to end on real worker processes (``python -m bench.uploads``).

A fresh database, bulk-inserted organizations, direct XCALLY uploads (1 s of GSM each, in a
local Active Storage directory) and their ``process`` ledger rows; native processing, the
XCALLY completion and the durable ledger flags on. The driver plays Rails' controller only:
its hand-off ``POST /internal/conversation_uploads/enqueue``, then Rails' ledger write
(``sent``; ``uncertain`` when the response is lost, which must not undo ``accepted``).
``rails_failures`` of the hand-offs fail in transport (row ``uncertain``, no job: only the
reconciler repairs them). The completion hand-off is the native pass's own
(:mod:`services.uploads.handoff`): its ``sync_completion`` row, the pinned job after the
recording attachment; the workers refuse ``hand_off_failures`` of those enqueues once (as if
Redis had failed: the row goes ``uncertain`` and the process job retries). Rails'
``complete_conversation_sync`` answers 500 for ``rails_failures`` of the calls (retried) and
sets ``conversations.last_synced_at`` otherwise.

``corrupt`` of the recordings are undecodable (terminal: failed with the reason). Rows are
aged past the 10-minute grace between reconciler rounds. The verdicts: every upload completed
or failed with a reason, every ledger row terminal, one ``sync_completion`` row written by
API2 per completed upload, one recording per call detail, one completion per conversation,
no unresolved claim.
"""

from __future__ import annotations

import os
import random
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from testkit.reports_scenario import _drop_namespace
from testkit.scenario_database import drop_database, new_database, server_database_url
from testkit.uploads_rows import seed_uploads, verdicts

NATIVE = "api2_conversation_upload_native_processing"
COMPLETION = "api2_conversation_upload_sync_completion"
DURABLE = "api2_conversation_upload_durable_delivery"
PROCESS_ROUTE = "/internal/conversation_uploads/enqueue"
TOKEN = "uploads-bench-token"


@dataclass(frozen=True)
class UploadsConfig:
    uploads: int = 2000
    organizations: int = 20
    rails_failures: float = 0.05
    lost_responses: float = 0.01
    corrupt: float = 0.05
    #: completion hand-offs whose enqueue a worker refuses once (Redis failing)
    hand_off_failures: float = 0.05
    workers: int = 2
    threads: int = 4
    seed: int = 12
    #: the run gives up (and reports what is not terminal) after this long
    timeout_seconds: float = 1800.0


def _refusing_hand_offs(router: Any, rate: float, seed: int) -> None:
    """Make ``router`` refuse ``rate`` of the completion hand-offs' first enqueue, as a
    failing Redis would (``QueueUnavailable``)."""
    from services.uploads.families import COMPLETION_KIND
    from shared.errors import QueueUnavailable

    rnd, refused, lock = random.Random(seed), set(), threading.Lock()
    enqueue_many = router.enqueue_many

    def faulty(requests: Any) -> Any:
        for request in requests:
            upload = request.params.get("conversation_upload_id")
            if request.kind == COMPLETION_KIND:
                with lock:
                    refuse = upload not in refused and rnd.random() < rate
                    refused.add(upload)
                if refuse:
                    raise QueueUnavailable("injected: Redis refused the completion hand-off")
        return enqueue_many(requests)

    router.enqueue_many = faulty


def worker_main(values: dict[str, Any], threads: int, hand_off_failures: float = 0.0) -> None:
    """Serve the maintenance tier (the upload families) until SIGTERM, with a fast backoff."""
    import dataclasses

    from services.app.bootstrap import bootstrap
    from shared.config import load_settings
    from tiers.policies import RetryPolicy
    from tiers.worker import serve

    platform = bootstrap(load_settings(**values), component="uploads-worker")
    by_name = platform.registry.by_name()
    for name in ("conversation_upload_process", "provider_conversation_sync_completion"):
        by_name[name] = dataclasses.replace(
            by_name[name], retry=RetryPolicy(max_attempts=5, base_seconds=0.2)
        )
    if hand_off_failures:
        _refusing_hand_offs(platform.router, hand_off_failures, os.getpid())
    try:
        serve(
            platform.broker,
            platform.registry.queues_of_tier("maintenance"),
            threads=threads,
            poll_ms=50,
            drain_seconds=5,
        )
    finally:
        platform.close()


def run_uploads(config: UploadsConfig, redis_url: str) -> dict[str, Any]:
    """Run the scenario; the figures and ``problems`` (empty when every verdict holds)."""
    from shared.db.engine import make_engine, make_session_factory
    from shared.db.migrate import upgrade
    from testkit.fakes.rails_server import RailsServer

    server = server_database_url()
    database_url = new_database(server, "speedtier_uploads_")
    namespace = f"uploads-{uuid.uuid4().hex[:8]}"
    rails = RailsServer(token="rails-bench")
    engine = make_engine(database_url)
    storage = tempfile.TemporaryDirectory(prefix="speedtier-uploads-")
    try:
        upgrade(database_url)
        sessions = make_session_factory(engine)
        with rails:
            values = {
                "redis_url": redis_url,
                "database_url": database_url,
                "redis_namespace": namespace,
                "environment": "test",
                "egress_allowed_networks": "127.0.0.1/32",  # the fakes listen on loopback
                "internal_api_token": TOKEN,
                "metrics_port": 0,
                "rails_internal_url": rails.base_url,
                "rails_internal_token": rails.token,
                "rails_timeout_seconds": 10.0,
                "flag_overrides": {NATIVE: True, COMPLETION: True, DURABLE: True},
                "uploads_storage": "local",
                "uploads_root": storage.name,
                "uploads_service_name": "local",
                "heartbeat_timeout_seconds": 5.0,
            }
            return _drive(config, values, sessions, engine, rails, Path(storage.name))
    finally:
        engine.dispose()
        storage.cleanup()
        _drop_namespace(redis_url, namespace)
        drop_database(server, database_url)


def _fates(config: UploadsConfig) -> list[str]:
    """Each upload's fate: ``corrupt``, ``transport`` (hand-off lost), ``lost`` (response
    lost) or ``ok``."""
    rnd = random.Random(config.seed)
    fates = []
    for _ in range(config.uploads):
        draw = rnd.random()
        fates.append(
            "corrupt"
            if draw < config.corrupt
            else "transport"
            if draw < config.corrupt + config.rails_failures
            else "lost"
            if draw < config.corrupt + config.rails_failures + config.lost_responses
            else "ok"
        )
    return fates


def _rails_marks(db: Any, kind: str, upload_id: int, state: str) -> None:
    """Rails' write after its POST: only a row still ``pending`` moves."""
    from sqlalchemy import text

    db.execute(
        text(
            "UPDATE conversation_upload_deliveries SET state = :state, last_attempted_at = now()"
            " WHERE conversation_upload_id = :id AND kind = :kind AND state = 'pending'"
        ),
        {"state": state, "id": upload_id, "kind": kind},
    )


def _drive(
    config: UploadsConfig,
    values: dict[str, Any],
    sessions: Any,
    engine: Any,
    rails: Any,
    root: Path,
) -> dict[str, Any]:
    import multiprocessing

    from sqlalchemy import text

    from services.app.api import create_app
    from services.app.bootstrap import bootstrap
    from shared.config import load_settings
    from testkit.reports_workers import stop

    seed_started = time.monotonic()
    created = seed_uploads(engine, root, _fates(config), config.organizations)
    seed_seconds = time.monotonic() - seed_started

    completions: Counter[int] = Counter()
    lock = threading.Lock()
    failing = random.Random(config.seed + 1)
    original = rails._complete_conversation_sync
    rails_500s = 0

    def complete(request: Any, conversation_id: int | None) -> Any:
        nonlocal rails_500s
        from testkit.fakes.protocol_server import Reply
        from testkit.fakes.rails_server import rails_error

        with lock:
            fail = failing.random() < config.rails_failures
            if fail:
                rails_500s += 1
            else:
                completions[int(conversation_id or 0)] += 1
        if fail:
            return Reply(500, rails_error("deadlock", "PG::TRDeadlockDetected", retryable=True))
        with engine.begin() as db:
            db.execute(
                text("UPDATE conversations SET last_synced_at = now() WHERE id = :id"),
                {"id": conversation_id},
            )
        return original(request, conversation_id)

    rails._complete_conversation_sync = complete
    platform = bootstrap(load_settings(**values), component="uploads-driver")
    client = create_app(platform).test_client()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(
            target=worker_main,
            args=(values, config.threads, config.hand_off_failures),
            daemon=True,
        )
        for _ in range(config.workers)
    ]
    for worker in workers:
        worker.start()
    handed: dict[int, float] = {}
    started = time.monotonic()
    rounds = replays = 0
    try:
        for upload_id, (org, fate) in created.items():
            handed[upload_id] = time.time()
            if fate == "transport":
                with engine.begin() as db:
                    _rails_marks(db, "process", upload_id, "uncertain")
                continue
            body = {
                "requests": [
                    {
                        "kind": "process_conversation_upload",
                        "organization_id": org,
                        "conversation_upload_id": upload_id,
                    }
                ]
            }
            answer = client.post(PROCESS_ROUTE, json=body, headers=auth)
            assert answer.status_code == 202, answer.get_data(as_text=True)
            with engine.begin() as db:
                _rails_marks(db, "process", upload_id, "uncertain" if fate == "lost" else "sent")
        deadline = time.monotonic() + config.timeout_seconds
        while time.monotonic() < deadline:
            if _live(platform) == 0 and _settled(engine):
                open_rows = _open_rows(engine)
                if not open_rows or rounds >= 8:
                    break
                with engine.begin() as db:  # ten minutes pass
                    db.execute(
                        text(
                            "UPDATE conversation_upload_deliveries"
                            " SET updated_at = updated_at - interval '11 minutes'"
                        )
                    )
                summary = platform.tick("conversation-upload-checks").run(f"bench-{rounds}")
                replays += int(summary.get("ledger_replay", 0))
                rounds += 1
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        load = os.getloadavg()
    finally:
        stop(*workers)
        platform.close()
    return {
        "config": asdict(config),
        **verdicts(engine, created, handed, completions, elapsed),
        "seed_seconds": round(seed_seconds, 1),
        "seconds": round(elapsed, 1),
        "reconciler_rounds": rounds,
        "reconciler_replays": replays,
        "rails_500s_injected": rails_500s,
        "load_average_1_5_15": [round(v, 2) for v in load],
    }


def _live(platform: Any) -> int:
    from tiers.job_store import LIVE_STATES

    jobs = platform.broker.jobs
    keys = list(jobs.client.scan_iter(match=f"{jobs.namespace}:job:*", count=1000))
    pipe = jobs.client.pipeline(transaction=False)
    for key in keys:
        pipe.hget(key, "state")
    states = pipe.execute() if keys else []
    return sum(1 for state in states if state is not None and state.decode() in LIVE_STATES)


def _settled(engine: Any) -> bool:
    """Nothing in flight: no upload processing. Pending uploads whose hand-off was lost wait
    for the reconciler."""
    from sqlalchemy import text

    with engine.begin() as db:
        processing = db.execute(
            text("SELECT count(*) FROM conversation_uploads WHERE status = 'processing'")
        ).scalar_one()
    return int(processing) == 0


def _open_rows(engine: Any) -> int:
    from sqlalchemy import text

    with engine.begin() as db:
        return int(
            db.execute(
                text(
                    "SELECT count(*) FROM conversation_upload_deliveries"
                    " WHERE state NOT IN ('completed', 'failed')"
                )
            ).scalar_one()
        )
