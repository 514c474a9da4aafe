"""Super-source connections' credentials and webhook secrets are sealed with the platform's
key ring (``services.super_sources.connection_secrets``): stored sealed, read sealed or (a row
a peer wrote plain) plain, sealed by ``speedtier super seal-credentials`` and by migration
``api2_0008``, on the real PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from sqlalchemy import Connection, text

from services.app.bootstrap import Platform
from services.app.cli import main
from services.super_sources import store
from services.super_sources.connection_secrets import credentials_of, webhook_secret_of
from shared.credentials import CredentialBox, CredentialsUnreadable
from shared.db import migrate
from shared.db.engine import make_engine, session_scope
from tests.fixtures_platform import CREDENTIALS_KEY, MakePlatform
from tests.integration.services.super_sources.conftest import credential_box, make_connection

SECRET_TOKEN = "ghp_sealed0123456789abcdefghijklmnop"
WEBHOOK_SECRET = "whsec-sealed-0123456789"
BOX = CredentialBox.from_setting(CREDENTIALS_KEY)


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    return make_platform()


def stored(platform: Platform, connection_id: int) -> dict[str, object]:
    with platform.engine.connect() as connection:
        row = connection.execute(
            text(
                "SELECT credentials, webhook_secret, sealed_credentials, sealed_webhook_secret "
                "FROM api2.super_source_connections WHERE id = :id"
            ),
            {"id": connection_id},
        ).one()
    return dict(row._mapping)


def insert_plain(connection: Connection, organization_id: int) -> int:
    """A connection as a peer writes it: plain JSONB credentials and webhook secret."""
    base = connection.execute(
        text(
            "INSERT INTO api2.knowledge_bases (organization_id, name) "
            "VALUES (:org, 'super:github') RETURNING id"
        ),
        {"org": organization_id},
    ).scalar_one()
    return int(
        connection.execute(
            text(
                "INSERT INTO api2.super_source_connections "
                "(organization_id, source, knowledge_base_id, credentials, webhook_key, "
                "webhook_secret) VALUES (:org, 'github', :base, CAST(:credentials AS jsonb), "
                ":key, :secret) RETURNING id"
            ),
            {
                "org": organization_id,
                "base": base,
                "credentials": json.dumps({"token": SECRET_TOKEN}),
                "key": f"acme/plain-{organization_id}",
                "secret": WEBHOOK_SECRET,
            },
        ).scalar_one()
    )


def test_a_new_connection_is_stored_sealed(platform: Platform) -> None:
    # When a connection is created with credentials and a webhook secret
    ident = make_connection(
        platform,
        7001,
        "github",
        credentials={"token": SECRET_TOKEN, "depth": 2},
        webhook_key="acme/sealed",
        webhook_secret=WEBHOOK_SECRET,
    )
    # Then no plain copy is stored, and the sealed bytes do not hold the secrets
    row = stored(platform, ident)
    assert row["credentials"] == {} and row["webhook_secret"] is None
    sealed = bytes(row["sealed_credentials"]) + bytes(row["sealed_webhook_secret"])  # type: ignore[arg-type]
    assert SECRET_TOKEN.encode() not in sealed and WEBHOOK_SECRET.encode() not in sealed
    # And the readers open them (non-string values kept)
    with session_scope(platform.sessions) as session:
        connection = store.connection(session, 7001, ident)
        assert credentials_of(connection, BOX) == {"token": SECRET_TOKEN, "depth": 2}
        assert webhook_secret_of(connection, BOX) == WEBHOOK_SECRET
        other_key = CredentialBox.from_setting("J8dL3xQm0s1vYcT5rN2wKe7pH4aZg6uB9fR0oV1iXkE=")
        with pytest.raises(CredentialsUnreadable):
            credentials_of(connection, other_key)


def test_a_plain_row_is_read_then_sealed_by_the_command(
    platform: Platform, redis_url: str, database_url: str, namespace: str
) -> None:
    # Given a connection a peer wrote plain
    with platform.engine.begin() as connection:
        ident = insert_plain(connection, 7002)
    with session_scope(platform.sessions) as session:
        row = store.connection(session, 7002, ident)
        assert credentials_of(row, credential_box(platform)) == {"token": SECRET_TOKEN}
        assert webhook_secret_of(row, credential_box(platform)) == WEBHOOK_SECRET
    # When the operator seals
    env = {
        "SPEEDTIER_ENV": "test",
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY": CREDENTIALS_KEY,
    }
    result = CliRunner().invoke(main, ["super", "seal-credentials"], env=env)
    assert result.exit_code == 0, result.output
    assert "sealed" in result.output
    # Then the row is sealed, and reads the same
    after = stored(platform, ident)
    assert after["credentials"] == {} and after["webhook_secret"] is None
    with session_scope(platform.sessions) as session:
        row = store.connection(session, 7002, ident)
        assert credentials_of(row, BOX) == {"token": SECRET_TOKEN}
        assert webhook_secret_of(row, BOX) == WEBHOOK_SECRET
    # And without a key the command refuses, naming the variable
    keyless = {**env, "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY": None}
    with platform.engine.begin() as connection:
        insert_plain(connection, 7003)
    refused = CliRunner().invoke(main, ["super", "seal-credentials"], env=keyless)
    assert refused.exit_code == 1 and "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY" in refused.output


@pytest.fixture
def migrated_to_0007(empty_database_url: str) -> Iterator[str]:
    migrate.upgrade(empty_database_url)
    migrate.downgrade(empty_database_url, branch="api2", revision="api2_0007")
    yield empty_database_url


def test_the_migration_seals_existing_rows_and_its_downgrade_opens_them(
    migrated_to_0007: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a plain row written before the migration
    engine = make_engine(migrated_to_0007)
    try:
        with engine.begin() as connection:
            ident = insert_plain(connection, 7004)
        # When the migration runs with the key configured
        monkeypatch.setenv("SPEEDTIER_CONNECTOR_CREDENTIALS_KEY", CREDENTIALS_KEY)
        migrate.upgrade(migrated_to_0007)
        # Then the secrets are sealed and the plain columns cleared
        select = text(
            "SELECT credentials, webhook_secret, sealed_credentials, sealed_webhook_secret "
            "FROM api2.super_source_connections WHERE id = :id"
        )
        with engine.connect() as connection:
            credentials, secret, sealed, sealed_secret = connection.execute(
                select, {"id": ident}
            ).one()
        assert credentials == {} and secret is None
        assert BOX.open_value(sealed) == {"token": SECRET_TOKEN}
        assert BOX.open_value(sealed_secret) == WEBHOOK_SECRET
        # And a downgrade puts them back
        migrate.downgrade(migrated_to_0007, branch="api2", revision="api2_0007")
        with engine.connect() as connection:
            back = connection.execute(
                text(
                    "SELECT credentials, webhook_secret FROM api2.super_source_connections "
                    "WHERE id = :id"
                ),
                {"id": ident},
            ).one()
        assert back == ({"token": SECRET_TOKEN}, WEBHOOK_SECRET)
    finally:
        engine.dispose()


def test_without_a_key_the_migration_leaves_rows_plain(
    migrated_to_0007: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(migrated_to_0007)
    try:
        with engine.begin() as connection:
            ident = insert_plain(connection, 7005)
        monkeypatch.delenv("SPEEDTIER_CONNECTOR_CREDENTIALS_KEY", raising=False)
        migrate.upgrade(migrated_to_0007)
        with engine.connect() as connection:
            row = connection.execute(
                text(
                    "SELECT credentials, sealed_credentials FROM api2.super_source_connections "
                    "WHERE id = :id"
                ),
                {"id": ident},
            ).one()
        assert row == ({"token": SECRET_TOKEN}, None)
    finally:
        engine.dispose()
