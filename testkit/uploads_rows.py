"""The conversation-uploads scenario's rows (``testkit/uploads_scenario.py``): the bulk
set-up (one multi-row INSERT per table) and the verdicts read back after the run."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from testkit.media import gsm_bytes


def seed_uploads(
    engine: Any, root: Path, fates: list[str], organizations: int
) -> dict[int, tuple[int, str]]:
    """Bulk inserts: organizations, their XCALLY data sources, one upload per fate with its
    blob, attachment and ``process`` ledger row; the objects written to ``root`` (a
    ``corrupt`` fate gets an undecodable one). Returns upload id -> (organization id, fate)."""
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
    with engine.begin() as db:
        orgs = list(
            db.execute(
                insert(Organization).returning(Organization.id),
                [{"name": f"uploads-{i}"} for i in range(organizations)],
            ).scalars()
        )
        source = db.execute(
            insert(DataSource).values(key="xcally", name="xcally").returning(DataSource.id)
        ).scalar_one()
        db.execute(
            insert(OrganizationDataSource),
            [{"organization_id": org, "data_source_id": source} for org in orgs],
        )
        owners = [orgs[i % len(orgs)] for i in range(len(fates))]
        keys = [uuid.uuid4().hex[:28] for _ in fates]
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


def verdicts(
    engine: Any,
    created: dict[int, tuple[int, str]],
    handed: dict[int, float],
    completions: Counter[int],
    elapsed: float,
) -> dict[str, Any]:
    """What the run left, read back: counts, latencies and ``problems`` (empty when every
    verdict holds). ``handed``: upload id -> hand-off time; ``completions``: Rails'
    ``complete_conversation_sync`` calls that landed, per conversation."""
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
        hand_offs = db.execute(
            text(
                "SELECT d.conversation_upload_id, d.owner, d.state, d.completed_at,"
                " d.last_error, d.sync_run_id FROM conversation_upload_deliveries d"
                " WHERE d.kind = 'sync_completion'"
            )
        ).all()
    statuses = Counter(row.status for row in uploads)
    corrupt = {i for i, (_, fate) in created.items() if fate == "corrupt"}
    latencies = sorted(
        row.processed_at.timestamp() - handed[row.id]
        for row in uploads
        if row.processed_at is not None
    )
    synced_latencies = sorted(
        row.completed_at.timestamp() - handed[row.conversation_upload_id]
        for row in hand_offs
        if row.completed_at is not None
    )
    problems = []
    completed_ids = {row.id for row in uploads if row.status == "completed"}
    native_hand_offs = {
        row.conversation_upload_id
        for row in hand_offs
        if row.owner == "api2"
        and row.state == "completed"
        and row.sync_run_id == f"xcally-upload-{row.conversation_upload_id}"
    }
    if native_hand_offs != completed_ids or len(hand_offs) != len(completed_ids):
        problems.append(
            f"{len(completed_ids)} completed uploads, {len(native_hand_offs)} completed"
            f" native hand-offs, {len(hand_offs)} sync_completion rows"
        )
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
    return {
        "uploads": dict(statuses),
        "ledger": {f"{kind}:{state}": n for kind, state, n in ledger},
        "recordings": len(recordings),
        "completions": sum(completions.values()),
        "duplicate_completions": duplicates,
        "uploads_per_second": round(len(uploads) / elapsed, 1) if elapsed else None,
        "hand_off_to_completed_p50_s": _pct(latencies, 0.5),
        "hand_off_to_completed_p95_s": _pct(latencies, 0.95),
        "hand_off_to_synced_p50_s": _pct(synced_latencies, 0.5),
        "hand_off_to_synced_p95_s": _pct(synced_latencies, 0.95),
        "completion_enqueues_refused": sum(
            1 for row in hand_offs if (row.last_error or "").startswith("enqueue failed")
        ),
        "problems": problems,
    }


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * (len(values) - 1)))], 2)
