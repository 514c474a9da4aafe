"""Shadow runs of native upload processing: an upload Rails processed is read again by the
native rules, read-only, and what differs from what Rails wrote is kept; ``speedtier uploads
parity`` and the canary report it. Rails' writes are played on the database before its
``process_direct`` answers ``completed`` (the local Rails server)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from services.app.bootstrap import Platform
from services.uploads import cli as uploads_cli
from services.uploads.families import process_request
from services.uploads.object_store import S3ObjectStore
from shared.db.engine import session_scope
from shared.db.models import (
    Client,
    Conversation,
    ConversationMembership,
    ConversationUpload,
    Employee,
)
from shared.rollouts import CONVERSATION_UPLOAD_NATIVE_PROCESSING_SHADOW
from testkit.fakes.rails_server import RailsServer
from tests.fixtures_platform import MakePlatform
from tests.integration.services.maintenance.factories import running_workers
from tests.integration.services.uploads.conftest import Uploads, s3_settings, xcally_metadata
from tests.platform_harness import wait_until

RAILS_TOKEN = "rails-tkn"


@pytest.fixture
def rails() -> Iterator[RailsServer]:
    server = RailsServer(token=RAILS_TOKEN)
    with server:
        yield server


@pytest.fixture
def platform(
    make_platform: MakePlatform, rails: RailsServer, objects: S3ObjectStore, s3_endpoint: str
) -> Platform:
    return make_platform(
        rails_internal_url=rails.base_url,
        rails_internal_token=RAILS_TOKEN,
        flag_overrides={CONVERSATION_UPLOAD_NATIVE_PROCESSING_SHADOW: True},
        **s3_settings(objects, s3_endpoint),
    )


def _rails_wrote(uploads: Uploads, upload_id: int, external_id: str) -> int:
    """What Rails' XCALLY processor leaves: the conversation under the XCALLY data source,
    the agent and client memberships, the upload pointing at the conversation."""
    org = uploads.org_id
    with session_scope(uploads.sessions) as session:
        agent = Employee(organization_id=org, name="Ann Agent", email="agent@example.com")
        client = Client(organization_id=org, phone="+15550001", name="Carl")
        conversation = Conversation(
            organization_id=org,
            organization_data_source_id=uploads.data_source_ids["xcally"],
            external_id=external_id,
        )
        session.add_all([agent, client, conversation])
        session.flush()
        for member_type, member_id, role in (
            ("Employee", agent.id, "agent"),
            ("Client", client.id, "client"),
        ):
            session.add(
                ConversationMembership(
                    organization_id=org,
                    conversation_id=conversation.id,
                    member_type=member_type,
                    member_id=member_id,
                    role=role,
                )
            )
        upload = session.get(ConversationUpload, upload_id)
        assert upload is not None
        upload.conversation_id = conversation.id
        session.commit()
        return conversation.id


def _process(platform: Platform, uploads: Uploads, upload_id: int) -> None:
    job_id = f"conversation-upload-process-{upload_id}"
    platform.router.enqueue(process_request(uploads.org_id, upload_id))
    with running_workers(platform):
        wait_until(lambda: (platform.broker.jobs.record(job_id) or {}).get("state") == "completed")


def _parity(platform: Platform, org: int) -> tuple[int, str]:
    result = CliRunner().invoke(
        uploads_cli.uploads, ["parity", "--org", str(org)], obj=lambda: platform
    )
    return result.exit_code, result.output


def _rows(uploads: Uploads, model: Any) -> int:
    with session_scope(uploads.sessions) as session:
        return int(
            session.scalar(
                select(func.count())
                .select_from(model)
                .where(model.organization_id == uploads.org_id)
            )
            or 0
        )


def test_an_upload_rails_processed_as_the_native_rules_would_matches(
    platform: Platform, rails: RailsServer, uploads: Uploads
) -> None:
    upload = uploads.upload(xcally_metadata("shadow-same"))
    _rails_wrote(uploads, upload, "shadow-same")
    _process(platform, uploads, upload)
    code, output = _parity(platform, uploads.org_id)
    assert code == 0, output
    assert f"match    org {uploads.org_id} upload {upload}" in output
    # read-only: the native reading created nothing of its own
    assert (_rows(uploads, Conversation), _rows(uploads, Client)) == (1, 1)


def test_a_conversation_identity_rails_does_not_share_diverges(
    platform: Platform, rails: RailsServer, uploads: Uploads
) -> None:
    # Given Rails keyed the conversation by another field than the native rules' call id
    upload = uploads.upload(xcally_metadata("shadow-call-id"))
    conversation = _rails_wrote(uploads, upload, "rails-other-key")
    _process(platform, uploads, upload)
    code, output = _parity(platform, uploads.org_id)
    assert code == 1
    assert f"conversation: rails {conversation}, native none" in output
    canary = CliRunner().invoke(
        uploads_cli.uploads, ["canary", str(uploads.org_id)], obj=lambda: platform
    )
    assert "[fail] native processing shadow runs of the organization: 1, diverged: 1" in (
        canary.output
    )


def test_metadata_the_native_rules_cannot_read_diverges(
    platform: Platform, rails: RailsServer, uploads: Uploads
) -> None:
    # Given metadata whose call id Rails found under a field the native rules do not read
    metadata = xcally_metadata("x")
    del metadata["uniqueid"]
    metadata["call_uuid"] = "shadow-unread"
    upload = uploads.upload(metadata)
    _rails_wrote(uploads, upload, "shadow-unread")
    _process(platform, uploads, upload)
    code, output = _parity(platform, uploads.org_id)
    assert code == 1
    assert "native would fail: MetadataInvalid: uniqueid (the call id) is missing" in output
