"""``speedtier uploads check``: each of the seed's queries passes on clean data and fails on
the rows it is there to catch (real PostgreSQL, rolled back after each test)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from sqlalchemy import text
from sqlalchemy.orm import Session

from services.uploads import checks, cli
from shared.db.models import (
    ActiveStorageAttachment,
    ActiveStorageBlob,
    Conversation,
    ConversationUpload,
    ConversationUploadDelivery,
    GoodJob,
    Organization,
)

NOW = datetime.now(UTC)
DEPLOYED_AT = NOW - timedelta(days=1)


@pytest.fixture
def clean(session: Session) -> Session:
    """The session over tables emptied of whatever other tests left (rolled back after)."""
    session.execute(
        text(
            "TRUNCATE conversation_upload_deliveries, active_storage_attachments,"
            " good_jobs, conversation_uploads CASCADE"
        )
    )
    return session


@pytest.fixture
def org(clean: Session) -> Organization:
    org = Organization(name="uploads-checks")
    clean.add(org)
    clean.flush()
    return org


def _verdicts(session: Session) -> list[bool]:
    return [c.passed for c in checks.run_checks(session, deployed_at=DEPLOYED_AT, now=NOW)]


def _upload(session: Session, org: Organization, **fields: object) -> ConversationUpload:
    row = ConversationUpload(organization_id=org.id, upload_type="direct", **fields)
    session.add(row)
    session.flush()
    return row


def _attach_file(session: Session, upload: ConversationUpload) -> None:
    blob = ActiveStorageBlob(
        key=f"k-{upload.id}", filename="a.zip", service_name="local", byte_size=1
    )
    session.add(blob)
    session.flush()
    session.add(
        ActiveStorageAttachment(
            name="file", record_type="ConversationUpload", record_id=upload.id, blob_id=blob.id
        )
    )
    session.flush()


def _delivery(
    session: Session, org: Organization, upload: ConversationUpload, **fields: object
) -> ConversationUploadDelivery:
    kind = str(fields.pop("kind", "process"))
    row = ConversationUploadDelivery(
        organization_id=org.id,
        conversation_upload_id=upload.id,
        kind=kind,
        delivery_key=f"conversation-upload/{kind}/{upload.id}",
        **fields,
    )
    session.add(row)
    session.flush()
    return row


def test_every_check_passes_on_a_healthy_database(clean: Session, org: Organization) -> None:
    # Given a fresh pending direct upload with its file, a completed delivery whose
    # conversation synced, an old GoodJob row and a presign upload expired long ago
    fresh = _upload(clean, org, created_at=NOW - timedelta(minutes=5))
    _attach_file(clean, fresh)
    conversation = Conversation(organization_id=org.id, last_synced_at=NOW)
    clean.add(conversation)
    clean.flush()
    _delivery(
        clean,
        org,
        fresh,
        kind="sync_completion",
        state="completed",
        conversation_id=conversation.id,
    )
    _upload(clean, org, status="expired", updated_at=DEPLOYED_AT - timedelta(hours=1))
    clean.add(
        GoodJob(
            job_class="CompleteConversationSyncJob",
            queue_name="default",
            created_at=NOW - timedelta(hours=13),
        )
    )
    clean.flush()

    assert _verdicts(clean) == [True] * 7


def test_each_check_fails_on_the_rows_it_catches(clean: Session, org: Organization) -> None:
    # Given one row of each kind the checks exist to catch
    stale = _upload(clean, org, created_at=NOW - timedelta(minutes=50))
    _attach_file(clean, stale)
    _upload(clean, org, status="expired", updated_at=NOW - timedelta(hours=1))
    _delivery(clean, org, stale, state="uncertain", updated_at=NOW - timedelta(minutes=11))
    other = _upload(clean, org, status="failed")
    _delivery(clean, org, other, state="failed", last_error="file gone", failed_at=NOW)
    unsynced = Conversation(organization_id=org.id)
    clean.add(unsynced)
    clean.flush()
    _delivery(
        clean,
        org,
        other,
        kind="sync_completion",
        state="completed",
        conversation_id=unsynced.id,
    )
    clean.add(
        GoodJob(
            job_class="CompleteConversationSyncJob",
            queue_name="default",
            created_at=NOW - timedelta(hours=1),
        )
    )
    clean.add(GoodJob(job_class="ProcessDirectUploadJob", created_at=NOW - timedelta(hours=1)))
    clean.flush()

    results = checks.run_checks(clean, deployed_at=DEPLOYED_AT, now=NOW)

    assert [c.passed for c in results] == [False] * 7
    assert f"id={stale.id}" in results[0].details[0]
    assert "state=uncertain" in results[2].details[0]
    assert "last_error=file gone" in results[3].details[0]
    assert f"conversation_id={unsynced.id}" in results[4].details[0]


def test_near_misses_pass(clean: Session, org: Organization) -> None:
    # Given rows just inside each boundary: a 40-minute-old pending direct upload, an
    # accepted ledger row moved 9 minutes ago, a CompleteConversationSyncJob on another
    # queue, and a pending direct upload without a file (left for the reconciler)
    young = _upload(clean, org, created_at=NOW - timedelta(minutes=40))
    _attach_file(clean, young)
    _upload(clean, org, created_at=NOW - timedelta(hours=3))
    # (the seed's query compares with the database's now(), not NOW: the module's NOW can be
    # minutes old by the time this test runs in a whole suite)
    moved = datetime.now(UTC) - timedelta(minutes=9)
    _delivery(clean, org, young, state="accepted", updated_at=moved)
    clean.add(GoodJob(job_class="CompleteConversationSyncJob", queue_name="low"))
    clean.add(GoodJob(job_class="SummarizeConversationJob", queue_name="default"))
    clean.flush()

    assert _verdicts(clean) == [True] * 7


class _Platform:
    def __init__(self, session: Session) -> None:
        self._session = session

    def sessions(self) -> Session:
        # A session on the test's connection inside its own savepoint: the command's rollback
        # undoes only that savepoint, not the ``clean`` truncate, so the second command does
        # not see rows other tests committed.
        return Session(bind=self._session.connection(), join_transaction_mode="create_savepoint")


def test_cli_prints_pass_and_fail_and_exits_non_zero(clean: Session, org: Organization) -> None:
    _upload(clean, org, status="expired", updated_at=NOW - timedelta(hours=1))
    clean.flush()
    runner = CliRunner()

    since_before = runner.invoke(
        cli.uploads,
        ["check", "--deployed-at", (NOW - timedelta(hours=2)).strftime("%Y-%m-%d %H:%M:%S")],
        obj=lambda: _Platform(clean),
    )
    since_after = runner.invoke(
        cli.uploads,
        ["check", "--deployed-at", NOW.strftime("%Y-%m-%dT%H:%M:%S")],
        obj=lambda: _Platform(clean),
    )

    assert since_before.exit_code == 1, since_before.output
    assert "[fail] direct uploads expired after" in since_before.output
    assert since_after.exit_code == 0, since_after.output
    assert since_after.output.count("[pass]") == 7


def test_cli_rejects_a_malformed_timestamp() -> None:
    result = CliRunner().invoke(cli.uploads, ["check", "--deployed-at", "yesterday"], obj=None)

    assert result.exit_code == 2
    assert "Invalid value for '--deployed-at'" in result.output
