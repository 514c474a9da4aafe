"""Seed 001's upload cutover assertions: the retired classes' zero-new-row check, the
GlobalID attribution of surviving CompleteConversationSyncJob rows, the runbook's readiness
and the per-organization canary gates, each shown to fail on the rows it exists to catch
and to pass without them (real PostgreSQL, rolled back after each test)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from services.uploads import cutover
from shared.db.models import (
    Conversation,
    ConversationUpload,
    ConversationUploadDelivery,
    DataSource,
    GoodJob,
    Organization,
    OrganizationDataSource,
)

NOW = datetime.now(UTC)
JOB_ID = "conversation-upload-checks-tick-2026-12-06T13:00Z"
SUMMARY = json.dumps({"added": 1, "graceDirect": 0, "ledger_reconciled": 0, "skippedDirect": 2})


@pytest.fixture
def clean(session: Session) -> Session:
    session.execute(
        text("TRUNCATE conversation_upload_deliveries, good_jobs, conversation_uploads CASCADE")
    )
    return session


def _org(session: Session) -> Organization:
    org = Organization(name="cutover")
    session.add(org)
    session.flush()
    return org


def _conversation(session: Session, org: Organization, source_key: str) -> Conversation:
    source = session.execute(select(DataSource).where(DataSource.key == source_key)).scalar()
    if source is None:
        source = DataSource(key=source_key, name=source_key)
        session.add(source)
        session.flush()
    ods = OrganizationDataSource(organization_id=org.id, data_source_id=source.id)
    session.add(ods)
    session.flush()
    conversation = Conversation(organization_id=org.id, organization_data_source_id=ods.id)
    session.add(conversation)
    session.flush()
    return conversation


def _completion_job(session: Session, conversation_id: int | None, age: timedelta) -> None:
    arguments: list[object] = [{"_aj_ruby2_keywords": ["sync_run_id"], "sync_run_id": "x"}]
    if conversation_id is not None:
        arguments.insert(0, {"_aj_globalid": f"gid://app/Conversation/{conversation_id}"})
    session.add(
        GoodJob(
            job_class="CompleteConversationSyncJob",
            queue_name="default",
            serialized_params={"job_class": "CompleteConversationSyncJob", "arguments": arguments},
            created_at=(NOW - age).replace(tzinfo=None),
        )
    )
    session.flush()


def _flag_on(_org_id: int) -> bool:
    return True


def test_retired_upload_classes_fail_on_a_new_row_and_pass_on_historical_ones(
    clean: Session,
) -> None:
    clean.add(GoodJob(job_class="ProcessDirectUploadJob", created_at=NOW - timedelta(hours=13)))
    clean.flush()
    assert cutover.retired_upload_good_jobs(clean).passed

    for job_class in ("ConversationUploads::CheckNewUploadsJob", "ProcessDirectUploadJob"):
        clean.add(GoodJob(job_class=job_class, created_at=NOW - timedelta(hours=1)))
    clean.flush()
    result = cutover.retired_upload_good_jobs(clean)

    assert not result.passed
    assert "rows of the last 12 hours: 2" in result.summary
    assert any("job_class=ProcessDirectUploadJob" in line for line in result.details)


def test_a_surviving_completion_row_of_an_xcally_conversation_fails_with_the_flag_on(
    clean: Session,
) -> None:
    org = _org(clean)
    xcally = _conversation(clean, org, "xcally")
    _completion_job(clean, xcally.id, timedelta(hours=1))

    on = cutover.xcally_completion_rows(clean, _flag_on, NOW)
    off = cutover.xcally_completion_rows(clean, lambda _org: False, NOW)

    assert not on.passed
    assert f"conversation {xcally.id} org {org.id} xcally" in on.details[0]
    assert off.passed  # the organization is still on the legacy GoodJob completion


def test_rows_of_other_sources_pass_and_rows_without_a_conversation_fail(clean: Session) -> None:
    org = _org(clean)
    other = _conversation(clean, org, "zendesk")
    _completion_job(clean, other.id, timedelta(hours=1))
    _completion_job(clean, None, timedelta(hours=20))  # outside GoodJob's window

    assert cutover.xcally_completion_rows(clean, _flag_on, NOW).passed

    _completion_job(clean, None, timedelta(hours=1))
    result = cutover.xcally_completion_rows(clean, _flag_on, NOW)
    assert not result.passed
    assert "no Conversation GlobalID resolves" in result.details[0]


def test_readiness_needs_the_tick_summary_and_an_empty_ledger(clean: Session) -> None:
    org = _org(clean)

    missing = cutover.readiness(clean, JOB_ID, None)
    ready = cutover.readiness(clean, JOB_ID, {"state": "completed", "data:summary": SUMMARY})
    upload = ConversationUpload(organization_id=org.id, upload_type="direct")
    clean.add(upload)
    clean.flush()
    clean.add(
        ConversationUploadDelivery(
            organization_id=org.id,
            conversation_upload_id=upload.id,
            kind="process",
            delivery_key=f"conversation-upload/process/{upload.id}",
        )
    )
    clean.flush()
    with_ledger = cutover.readiness(clean, JOB_ID, {"state": "completed", "data:summary": SUMMARY})

    assert [c.passed for c in missing] == [False, True]
    assert f"scan tick {JOB_ID}: no record" in missing[0].summary
    assert [c.passed for c in ready] == [True, True]
    assert [c.passed for c in with_ledger] == [True, False]


def _delivery(
    session: Session, org: Organization, state: str, age: timedelta, **fields: object
) -> ConversationUploadDelivery:
    upload = ConversationUpload(organization_id=org.id, upload_type="direct")
    session.add(upload)
    session.flush()
    kind = str(fields.pop("kind", "process"))
    moment = (NOW - age).replace(tzinfo=None)
    row = ConversationUploadDelivery(
        organization_id=org.id,
        conversation_upload_id=upload.id,
        kind=kind,
        state=state,
        delivery_key=f"conversation-upload/{kind}/{upload.id}",
        created_at=moment,
        updated_at=moment,
        **fields,
    )
    session.add(row)
    session.flush()
    return row


def test_canary_gates_pass_for_a_clean_day_and_fail_on_each_breach(clean: Session) -> None:
    org = _org(clean)
    other = _org(clean)
    since = NOW - timedelta(hours=25)
    _delivery(clean, org, "completed", timedelta(hours=3))
    _delivery(clean, org, "accepted", timedelta(minutes=2))  # in flight, inside the grace
    _delivery(clean, other, "failed", timedelta(hours=1))  # another organization's row

    assert [g.passed for g in cutover.canary_gates(clean, org.id, since, NOW)] == [True] * 7

    _delivery(clean, org, "uncertain", timedelta(minutes=30))
    _delivery(clean, org, "failed", timedelta(hours=1))
    unsynced = Conversation(organization_id=org.id)
    clean.add(unsynced)
    clean.flush()
    _delivery(
        clean,
        org,
        "completed",
        timedelta(hours=4),
        kind="sync_completion",
        conversation_id=unsynced.id,
    )
    for _ in range(2):
        clean.add(ConversationUpload(organization_id=org.id, upload_type="direct"))
    clean.flush()
    clean.execute(
        text("DROP INDEX IF EXISTS index_conversation_uploads_on_org_id_and_idempotency_key")
    )
    clean.execute(
        text(
            "UPDATE conversation_uploads SET idempotency_key = 'direct:k'"
            " WHERE organization_id = :o"
        ),
        {"o": org.id},
    )
    _completion_job(clean, _conversation(clean, org, "xcally").id, timedelta(hours=1))

    gates = cutover.canary_gates(clean, org.id, NOW - timedelta(hours=2), NOW)

    assert [g.passed for g in gates] == [False] * 7
    assert "2.0 h of 24 h" in gates[0].summary


def test_canary_gates_are_scoped_to_the_organization(clean: Session) -> None:
    org = _org(clean)
    other = _org(clean)
    _completion_job(clean, _conversation(clean, other, "xcally").id, timedelta(hours=1))
    _delivery(clean, other, "uncertain", timedelta(hours=1))

    gates = cutover.canary_gates(clean, org.id, NOW - timedelta(hours=24), NOW)

    assert all(g.passed for g in gates), [g.summary for g in gates if not g.passed]
