"""``speedtier ingestion sync-connector`` and ``rotate-credentials-key`` on real PostgreSQL
and Redis."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from cryptography.fernet import Fernet
from sqlalchemy import select

from services.app.bootstrap import Platform
from services.app.cli import main
from services.ingestion import store
from shared.credentials import CredentialBox, CredentialsUnreadable
from shared.db.models import KbConnection
from tests.fixtures_platform import MakePlatform
from tests.integration.services.ingestion.factories import new_org

OLD, NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    return make_platform(connector_credentials_key=OLD)


@pytest.fixture
def environment(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, database_url: str, namespace: str
) -> pytest.MonkeyPatch:
    for name, value in {
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_ENV": "test",
    }.items():
        monkeypatch.setenv(name, value)
    return monkeypatch


def connection(platform: Platform, organization_id: int, key: str, token: str) -> tuple[int, int]:
    """(connection id, binding id) of a new Drive connection bound to a new base."""
    with platform.sessions() as session:
        base = store.create_knowledge_base(session, organization_id=organization_id, name="B")
        row = store.create_connection(
            session,
            organization_id=organization_id,
            provider="google_drive",
            name=f"d-{token}",
            sealed=CredentialBox.from_setting(key).seal({"access_token": token}),
            credential_fields=["access_token"],
            settings={},
        )
        binding = store.create_binding(
            session,
            organization_id=organization_id,
            knowledge_base_id=base.id,
            connection_id=row.id,
            settings={},
        )
        session.commit()
        return row.id, binding.id


def token_of(platform: Platform, connection_id: int) -> bytes:
    with platform.sessions() as session:
        return bytes(
            session.scalar(select(KbConnection.credentials).where(KbConnection.id == connection_id))
            or b""
        )


def test_sync_connector_enqueues_the_bindings_job(
    platform: Platform, environment: pytest.MonkeyPatch
) -> None:
    organization_id = new_org()
    _, binding = connection(platform, organization_id, OLD, "t1")
    args = ["ingestion", "sync-connector", "--organization", str(organization_id), str(binding)]
    result = CliRunner().invoke(main, [*args, "--full"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"kb-connector-sync-{binding}: added on kb_connector_sync.slow"
    record = platform.broker.jobs.record(f"kb-connector-sync-{binding}")
    assert record is not None
    other = CliRunner().invoke(main, [*args[:3], str(organization_id + 1), str(binding)])
    assert other.exit_code == 1 and "has no binding" in other.output


def test_rotation_reseals_under_the_new_key(
    platform: Platform, environment: pytest.MonkeyPatch
) -> None:
    # Given two connections under the old key and one under a key no longer configured
    organization_id = new_org()
    first, _ = connection(platform, organization_id, OLD, "t1")
    second, _ = connection(platform, organization_id, OLD, "t2")
    lost, _ = connection(platform, organization_id, Fernet.generate_key().decode(), "t3")
    environment.setenv("SPEEDTIER_CONNECTOR_CREDENTIALS_KEY", f"{NEW},{OLD}")
    # When the key is rotated for the organization
    result = CliRunner().invoke(
        main, ["ingestion", "rotate-credentials-key", "--organization", str(organization_id)]
    )
    # Then both readable tokens open under the new key alone; the lost one is named
    assert result.exit_code == 1
    assert "2 connection(s) re-encrypted" in result.output and str(lost) in result.output
    new = CredentialBox.from_setting(NEW)
    assert new.open(token_of(platform, first)) == {"access_token": "t1"}
    assert new.open(token_of(platform, second)) == {"access_token": "t2"}
    with pytest.raises(CredentialsUnreadable):
        CredentialBox.from_setting(OLD).open(token_of(platform, first))


def test_rotation_needs_a_key(environment: pytest.MonkeyPatch) -> None:
    environment.delenv("SPEEDTIER_CONNECTOR_CREDENTIALS_KEY", raising=False)
    result = CliRunner().invoke(
        main, ["ingestion", "rotate-credentials-key", "--organization", "1"]
    )
    assert (
        result.exit_code == 1 and "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY is not set" in result.output
    )
