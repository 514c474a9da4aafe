"""Shadow runs of native upload processing beside Rails' processors (the Scientist pattern).

With PostHog ``api2_conversation_upload_native_processing_shadow`` on for an organization
whose XCALLY / Outreach Kaia uploads Rails still processes, each upload Rails reports
``completed`` is read again by the native rules, read-only (nothing is inserted, locked or
marked), and compared with what Rails wrote:

| native reading | compared with what Rails wrote |
| --- | --- |
| the metadata (``call_record``) and the data source | Rails processed it: a native |
|   | failure reads ``native would fail: MetadataInvalid: ...`` |
| the conversation (data source, call id, no ``external_type``) | the upload's |
|   | ``conversation_id`` when set, else that one exists |
| the agent (email, integration profile, name) | the ``agent`` membership |
| the customer (phone, email, name) | the ``client`` membership |

Runs are kept in a Redis list (the last :data:`KEEP`, for :data:`KEEP_SECONDS`);
``speedtier uploads parity`` lists them and exits 1 while any diverged (or none ran), and
``speedtier uploads canary`` fails while its window holds a divergence of the organization.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from services.uploads.call_metadata import CallRecord, Person, call_record
from services.uploads.errors import UploadProcessingFailed
from services.uploads.identities import data_source_of, employee_of
from shared.db.models import Client, Conversation, ConversationMembership, ConversationUpload
from shared.db.tenant import select_scoped
from shared.observability import current_job
from shared.parity import KeptShadowRun, ParityRun, ParitySource
from tiers.job_store import JobStore

log = logging.getLogger(__name__)

KEEP = 2000
KEEP_SECONDS = 8 * 86_400
SHADOW_WINDOW = timedelta(hours=24)


def log_key(jobs: JobStore) -> str:
    return f"{jobs.namespace}:shadow:conversation-upload-processing"


def compare(session: Session, organization_id: int, upload_id: int) -> dict[str, Any]:
    """The native reading of a Rails-processed upload against what Rails wrote (the caller's
    transaction is rolled back; nothing here writes)."""
    record: dict[str, Any] = {
        "ran_at": datetime.now(UTC).isoformat(),
        "organization_id": organization_id,
        "conversation_upload_id": upload_id,
    }
    upload = session.execute(
        select_scoped(ConversationUpload, organization_id=organization_id).where(
            ConversationUpload.id == upload_id
        )
    ).scalar()
    if upload is None:
        return {**record, "matched": False, "differences": ["upload gone"]}
    try:
        call = call_record(str(upload.source), upload.metadata_)
        data_source_id = data_source_of(session, organization_id, upload)
    except UploadProcessingFailed as exc:
        return {**record, "matched": False, "differences": [f"native would fail: {exc}"]}
    found = _differences(session, organization_id, upload, call, data_source_id)
    return {**record, "matched": not found, "differences": found}


def _differences(
    session: Session,
    organization_id: int,
    upload: ConversationUpload,
    call: CallRecord,
    data_source_id: int,
) -> list[str]:
    native = session.execute(
        select_scoped(Conversation, organization_id=organization_id)
        .where(
            Conversation.organization_data_source_id == data_source_id,
            Conversation.external_id == call.call_id,
            Conversation.external_type.is_(None),
        )
        .order_by(Conversation.id)
        .limit(1)
    ).scalar()
    native_id = native.id if native is not None else None
    rails_id = upload.conversation_id
    found: list[str] = []
    if native_id is None or (rails_id is not None and rails_id != native_id):
        found.append(f"conversation: rails {rails_id or 'set none'}, native {native_id or 'none'}")
    conversation_id = rails_id or native_id
    if conversation_id is None:
        return found
    members = _members(session, organization_id, conversation_id)
    agent = employee_of(session, organization_id, data_source_id, call.agent)
    if agent not in members["agent"] and (agent is not None or members["agent"]):
        found.append(f"agent: rails {_ids(members['agent'])}, native {agent or 'none'}")
    client = _client(session, organization_id, call.customer)
    if client not in members["client"] and (client is not None or members["client"]):
        found.append(f"client: rails {_ids(members['client'])}, native {client or 'none'}")
    return found


def _ids(values: set[int]) -> str:
    return ",".join(str(v) for v in sorted(values)) or "none"


def _members(session: Session, organization_id: int, conversation_id: int) -> dict[str, set[int]]:
    rows = session.execute(
        select(ConversationMembership.role, ConversationMembership.member_id).where(
            ConversationMembership.organization_id == organization_id,
            ConversationMembership.conversation_id == conversation_id,
        )
    ).all()
    members: dict[str, set[int]] = {"agent": set(), "client": set()}
    for role, member_id in rows:
        members.setdefault(str(role), set()).add(int(member_id))
    return members


def _client(session: Session, organization_id: int, customer: Person) -> int | None:
    """The client the native rules match (phone, email, name), without creating one."""
    rules = (
        (Client.phone, customer.phone),
        (func.lower(Client.email), customer.email),
        (func.lower(Client.name), customer.name.lower() if customer.name else None),
    )
    for column, value in rules:
        if value:
            query = select_scoped(Client, organization_id=organization_id).where(column == value)
            found = session.execute(query.order_by(Client.id).limit(1)).scalar()
            if found is not None:
                return int(found.id)
    return None


def shadow_process(
    sessions: sessionmaker[Session], jobs: JobStore, organization_id: int, upload_id: int
) -> dict[str, Any]:
    """Compare, read-only, and keep the run; never raises (the job is Rails')."""
    try:
        with sessions() as session:
            try:
                result = compare(session, organization_id, upload_id)
            finally:
                session.rollback()
    except Exception as exc:
        result = {
            "ran_at": datetime.now(UTC).isoformat(),
            "organization_id": organization_id,
            "conversation_upload_id": upload_id,
            "matched": False,
            "differences": [f"native reading raised {type(exc).__name__}: {exc}"[:500]],
        }
    job = current_job.get()
    result["job_id"] = job.get("job_id") if job else None
    key = log_key(jobs)
    try:
        pipe = jobs.client.pipeline()
        pipe.lpush(key, json.dumps(result, sort_keys=True, default=str))
        pipe.ltrim(key, 0, KEEP - 1)
        pipe.expire(key, KEEP_SECONDS)
        pipe.execute()
    except Exception:  # a lost record shows as a missing run, never a failed upload
        log.warning("upload %s: shadow run not kept", upload_id, exc_info=True)
    return result


class ShadowRun(KeptShadowRun):
    """One kept comparison of an upload's native processing with Rails'."""


def shadow_runs(
    jobs: JobStore, since: datetime, organization_id: int | None = None
) -> list[ShadowRun]:
    """The kept runs since ``since`` (of one organization), oldest first."""
    runs = [ShadowRun(json.loads(item)) for item in jobs.client.lrange(log_key(jobs), 0, KEEP)]
    return sorted(
        (
            run
            for run in runs
            if run.ran_at >= since
            and (organization_id is None or run.record.get("organization_id") == organization_id)
        ),
        key=lambda run: run.ran_at,
    )


def parity_source(jobs: JobStore) -> ParitySource:
    """The upload shadow runs as the dashboard's Parity page reads them."""

    def read(since: datetime) -> list[ParityRun]:
        return [_parity(run) for run in shadow_runs(jobs, since)]

    return read


def _parity(run: ShadowRun) -> ParityRun:
    r = run.record
    found = tuple(str(line) for line in r.get("differences", []))
    organization_id = r.get("organization_id")
    return ParityRun(
        product="uploads",
        organization_id=int(organization_id) if organization_id is not None else None,
        ran_at=run.ran_at,
        matched=run.matched,
        subject=f"upload {r.get('conversation_upload_id')}",
        summary="native reading matches what rails wrote"
        if run.matched
        else f"{len(found)} difference{'' if len(found) == 1 else 's'} from what rails wrote",
        differences=found,
        job_id=r.get("job_id"),
    )
