"""Conversation uploads end to end on real worker processes (``python -m bench.uploads``).

A fresh database, bulk-inserted organizations, direct XCALLY uploads (1 s of GSM each, in a
local Active Storage directory) and their ``process`` ledger rows; native processing and the
XCALLY completion flag on. The driver plays Rails:

- the controller's hand-off ``POST /internal/conversation_uploads/enqueue``, then Rails'
  ledger write (``sent``; ``uncertain`` when the response is lost, which must not undo
  ``accepted``). ``rails_failures`` of the hand-offs fail in transport (row ``uncertain``, no
  job: only the reconciler repairs them);
- once an upload completed, ``Xcally#process``'s completion hand-off: the ``sync_completion``
  row, ``POST /internal/provider_conversation_sync_completions/enqueue``, the same faults;
- Rails' ``complete_conversation_sync`` answers 500 for ``rails_failures`` of the calls
  (retried) and sets ``conversations.last_synced_at`` otherwise.

``corrupt`` of the recordings are undecodable (terminal: failed with the reason). Rows are
aged past the 10-minute grace between reconciler rounds. The verdicts: every upload completed
or failed with a reason, every ledger row terminal, one recording per call detail, one
completion per conversation, no unresolved claim.
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

from testkit.media import gsm_bytes
from testkit.reports_scenario import _admin, _drop_namespace, _url, server_database_url

NATIVE = "api2_conversation_upload_native_processing"
COMPLETION = "api2_conversation_upload_sync_completion"
PROCESS_ROUTE = "/internal/conversation_uploads/enqueue"
COMPLETION_ROUTE = "/internal/provider_conversation_sync_completions/enqueue"
TOKEN = "uploads-bench-token"


@dataclass(frozen=True)
class UploadsConfig:
    uploads: int = 2000
    organizations: int = 20
    rails_failures: float = 0.05
    lost_responses: float = 0.01
    corrupt: float = 0.05
    workers: int = 2
    threads: int = 4
    seed: int = 12
    #: the run gives up (and reports what is not terminal) after this long
    timeout_seconds: float = 1800.0


def worker_main(values: dict[str, Any], threads: int) -> None:
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
    name = f"speedtier_uploads_{uuid.uuid4().hex[:8]}"
    with _admin(server) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    database_url = _url(server, name)
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
                "internal_api_token": TOKEN,
                "metrics_port": 0,
                "rails_internal_url": rails.base_url,
                "rails_internal_token": rails.token,
                "rails_timeout_seconds": 10.0,
                "flag_overrides": {NATIVE: True, COMPLETION: True},
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
        with _admin(server) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _seed(
    config: UploadsConfig, engine: Any, root: Path, rnd: random.Random
) -> dict[int, tuple[int, str]]:
    """Bulk inserts: organizations, their XCALLY data sources, uploads with their blobs,
    attachments and ``process`` ledger rows; the objects written to ``root``.
    Returns upload id -> (organization id, fate)."""
    from sqlalchemy import insert

    from services.uploads.object_store import LocalObjectStore
    from shared.db.models import (
        ActiveStorageAttachment,
        ActiveStorageBlob,
        ConversationUpload,
        ConversationUploadDelivery,
        DataSource,
        Organization,
        OrganizationDataSource,
    )

    store = LocalObjectStore(root, "local")
    good, junk = gsm_bytes(seconds=1), b"junk" * 64
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
    with engine.begin() as db:
        orgs = list(
            db.execute(
                insert(Organization).returning(Organization.id),
                [{"name": f"uploads-{i}"} for i in range(config.organizations)],
            ).scalars()
        )
        source = db.execute(
            insert(DataSource).values(key="xcally", name="xcally").returning(DataSource.id)
        ).scalar_one()
        db.execute(
            insert(OrganizationDataSource),
            [{"organization_id": org, "data_source_id": source} for org in orgs],
        )
        owners = [orgs[i % len(orgs)] for i in range(config.uploads)]
        keys = [uuid.uuid4().hex[:28] for _ in range(config.uploads)]
        for key, fate in zip(keys, fates, strict=True):
            store.write(key, junk if fate == "corrupt" else good, "application/octet-stream")
        uploads = list(
            db.execute(
                insert(ConversationUpload).returning(ConversationUpload.id),
                [
                    {
                        "organization_id": org,
                        "source": "xcally",
                        "upload_type": "direct",
                        "metadata": _metadata(f"bench-{i}"),
                    }
                    for i, org in enumerate(owners)
                ],
            ).scalars()
        )
        blobs = list(
            db.execute(
                insert(ActiveStorageBlob).returning(ActiveStorageBlob.id),
                [
                    {
                        "key": key,
                        "filename": "call.mp4" if fate == "corrupt" else "call.gsm",
                        "service_name": "local",
                        "byte_size": len(junk if fate == "corrupt" else good),
                    }
                    for key, fate in zip(keys, fates, strict=True)
                ],
            ).scalars()
        )
        db.execute(
            insert(ActiveStorageAttachment),
            [
                {
                    "name": "file",
                    "record_type": "ConversationUpload",
                    "record_id": upload,
                    "blob_id": blob,
                }
                for upload, blob in zip(uploads, blobs, strict=True)
            ],
        )
        db.execute(
            insert(ConversationUploadDelivery),
            [
                {
                    "organization_id": org,
                    "conversation_upload_id": upload,
                    "kind": "process",
                    "delivery_key": f"conversation-upload/process/{upload}",
                }
                for upload, org in zip(uploads, owners, strict=True)
            ],
        )
    return {upload: (org, fate) for upload, org, fate in zip(uploads, owners, fates, strict=True)}


def _metadata(call_id: str) -> dict[str, Any]:
    return {
        "uniqueid": call_id,
        "agent": {"email": "agent@example.com", "id": "ag-1", "name": "Ann Agent"},
        "customer": {"phone": f"+1555{call_id[-6:]}", "name": "Carl"},
        "direction": "inbound",
        "start_time": "2026-11-30T10:00:00Z",
    }


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

    rnd = random.Random(config.seed)
    seed_started = time.monotonic()
    created = _seed(config, engine, root, rnd)
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
        context.Process(target=worker_main, args=(values, config.threads), daemon=True)
        for _ in range(config.workers)
    ]
    for worker in workers:
        worker.start()
    handed: dict[int, float] = {}
    completion_fates: dict[int, str] = {}
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
            _hand_off_completions(config, engine, client, auth, created, completion_fates, rnd)
            if _live(platform) == 0 and _settled(engine, created, completion_fates):
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
    return _verdicts(
        config,
        engine,
        created,
        handed,
        completions,
        {
            "seed_seconds": round(seed_seconds, 1),
            "seconds": round(elapsed, 1),
            "reconciler_rounds": rounds,
            "reconciler_replays": replays,
            "rails_500s_injected": rails_500s,
            "load_average_1_5_15": [round(v, 2) for v in load],
        },
    )


def _hand_off_completions(
    config: UploadsConfig,
    engine: Any,
    client: Any,
    auth: dict[str, str],
    created: dict[int, tuple[int, str]],
    done: dict[int, str],
    rnd: random.Random,
) -> None:
    """Rails' ``Xcally#process`` after the recording: the sync_completion row, then the
    hand-off (some lost in transport, some responses lost)."""
    from sqlalchemy import text

    with engine.begin() as db:
        rows = db.execute(
            text(
                "SELECT id, conversation_id FROM conversation_uploads"
                " WHERE status = 'completed' AND conversation_id IS NOT NULL"
            )
        ).all()
        fresh = [(i, c) for i, c in rows if i not in done]
        for upload_id, conversation_id in fresh:
            org = created[upload_id][0]
            draw = rnd.random()
            fate = (
                "transport"
                if draw < config.rails_failures
                else "lost"
                if draw < config.rails_failures + config.lost_responses
                else "ok"
            )
            done[upload_id] = fate
            db.execute(
                text(
                    "INSERT INTO conversation_upload_deliveries (organization_id,"
                    " conversation_upload_id, conversation_id, kind, delivery_key, sync_run_id,"
                    " state, owner, attempts, replay_count, created_at, updated_at) VALUES"
                    " (:org, :id, :conv, 'sync_completion', :key, :run, 'pending', 'rails', 0, 0,"
                    " now(), now())"
                ),
                {
                    "org": org,
                    "id": upload_id,
                    "conv": conversation_id,
                    "key": f"conversation-upload/sync-completion/{upload_id}",
                    "run": f"xcally-upload-{upload_id}",
                },
            )
    for upload_id, conversation_id in fresh:
        fate = done[upload_id]
        with engine.begin() as db:
            if fate == "transport":
                _rails_marks(db, "sync_completion", upload_id, "uncertain")
                continue
            body = {
                "requests": [
                    {
                        "kind": "complete_provider_conversation_sync",
                        "organization_id": created[upload_id][0],
                        "conversation_upload_id": upload_id,
                        "conversation_id": conversation_id,
                        "sync_run_id": f"xcally-upload-{upload_id}",
                    }
                ]
            }
            answer = client.post(COMPLETION_ROUTE, json=body, headers=auth)
            assert answer.status_code == 202, answer.get_data(as_text=True)
            _rails_marks(
                db, "sync_completion", upload_id, "uncertain" if fate == "lost" else "sent"
            )


def _live(platform: Any) -> int:
    from tiers.job_store import LIVE_STATES

    jobs = platform.broker.jobs
    keys = list(jobs.client.scan_iter(match=f"{jobs.namespace}:job:*", count=1000))
    pipe = jobs.client.pipeline(transaction=False)
    for key in keys:
        pipe.hget(key, "state")
    states = pipe.execute() if keys else []
    return sum(1 for state in states if state is not None and state.decode() in LIVE_STATES)


def _settled(engine: Any, created: dict[int, tuple[int, str]], done: dict[int, str]) -> bool:
    """Nothing in flight: no upload processing, every completed one handed off (as Rails
    would). Pending uploads whose hand-off was lost wait for the reconciler."""
    from sqlalchemy import text

    with engine.begin() as db:
        rows = db.execute(text("SELECT id, status FROM conversation_uploads")).all()
    return all(
        status != "processing" and (status != "completed" or i in done) for i, status in rows
    )


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


def _verdicts(
    config: UploadsConfig,
    engine: Any,
    created: dict[int, tuple[int, str]],
    handed: dict[int, float],
    completions: Counter[int],
    figures: dict[str, Any],
) -> dict[str, Any]:
    from sqlalchemy import text

    with engine.begin() as db:
        uploads = db.execute(
            text(
                "SELECT id, status, last_processing_error, processed_at, conversation_id"
                " FROM conversation_uploads"
            )
        ).all()
        ledger = db.execute(
            text("SELECT kind, state, count(*) FROM conversation_upload_deliveries GROUP BY 1, 2")
        ).all()
        recordings = db.execute(
            text(
                "SELECT record_id, count(*) FROM active_storage_attachments"
                " WHERE record_type = 'CallDetail' AND name = 'recording' GROUP BY 1"
            )
        ).all()
        unsynced = db.execute(
            text(
                "SELECT count(*) FROM conversation_uploads u JOIN conversations c"
                " ON c.id = u.conversation_id WHERE u.status = 'completed'"
                " AND c.last_synced_at IS NULL"
            )
        ).scalar_one()
        unresolved = db.execute(
            text("SELECT count(*) FROM outbound_delivery_claims WHERE delivered_at IS NULL")
        ).scalar_one()
    statuses = Counter(row.status for row in uploads)
    corrupt = {i for i, (_, fate) in created.items() if fate == "corrupt"}
    latencies = sorted(
        row.processed_at.timestamp() - handed[row.id]
        for row in uploads
        if row.processed_at is not None
    )
    problems = []
    if set(statuses) - {"completed", "failed"}:
        problems.append(f"uploads not terminal: {dict(statuses)}")
    if any(row.status == "failed" and not row.last_processing_error for row in uploads):
        problems.append("a failed upload without its reason")
    failed_ids = {row.id for row in uploads if row.status == "failed"}
    if failed_ids != corrupt:
        problems.append(f"failed {len(failed_ids)} != corrupt {len(corrupt)}")
    if any(state not in ("completed", "failed") for _kind, state, _n in ledger):
        problems.append(f"ledger rows not terminal: {ledger}")
    if any(count != 1 for _record, count in recordings):
        problems.append("a call detail with more than one recording")
    if statuses["completed"] != len(recordings):
        problems.append(f"{statuses['completed']} completed, {len(recordings)} recordings")
    duplicates = sum(1 for count in completions.values() if count > 1)
    if duplicates:
        problems.append(f"{duplicates} conversations completed more than once")
    if unsynced:
        problems.append(f"{unsynced} completed uploads whose conversation never synced")
    if unresolved:
        problems.append(f"{unresolved} unresolved delivery claims")
    elapsed = figures["seconds"]
    return {
        "config": asdict(config),
        "uploads": dict(statuses),
        "ledger": {f"{kind}:{state}": n for kind, state, n in ledger},
        "recordings": len(recordings),
        "completions": sum(completions.values()),
        "duplicate_completions": duplicates,
        "uploads_per_second": round(len(uploads) / elapsed, 1) if elapsed else None,
        "hand_off_to_completed_p50_s": _pct(latencies, 0.5),
        "hand_off_to_completed_p95_s": _pct(latencies, 0.95),
        **figures,
        "problems": problems,
    }


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * (len(values) - 1)))], 2)
