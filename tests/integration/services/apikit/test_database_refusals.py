"""A route that meets a PostgreSQL refusing writes for now (SQLSTATE 25006: read-only,
in recovery, failing over) answers 503 database_unavailable, not 500; any other database
error stays a 500. Real PostgreSQL: the test's own database made read-only."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from flask import Blueprint
from flask.testing import FlaskClient
from flask.typing import ResponseReturnValue

from services.app.api import create_app
from tests.fixtures_db import create_database, drop_database
from tests.fixtures_platform import AUTH, MakePlatform


@pytest.fixture
def read_only_database() -> Iterator[str]:
    url = create_database("speedtier_readonly_api")
    name = url.rsplit("/", 1)[-1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    yield url
    drop_database(url)


def client_writing_to(make_platform: MakePlatform, database: str) -> FlaskClient:
    blueprint = Blueprint("writes", __name__, url_prefix="/internal/writes")

    @blueprint.post("/write")
    def write() -> ResponseReturnValue:
        with psycopg.connect(database, autocommit=True) as connection:
            connection.execute("CREATE TABLE written (id int)")
        return {"ok": True}

    @blueprint.post("/divide")
    def divide() -> ResponseReturnValue:
        with psycopg.connect(database, autocommit=True) as connection:
            connection.execute("SELECT 1 / 0")
        return {"ok": True}

    platform = make_platform()
    platform.add_routes(lambda: [blueprint])
    return create_app(platform).test_client()


def test_a_refused_write_is_503_database_unavailable(
    make_platform: MakePlatform, read_only_database: str
) -> None:
    client = client_writing_to(make_platform, read_only_database)
    response = client.post("/internal/writes/write", headers=AUTH)
    assert response.status_code == 503
    assert response.json["error"] == "database_unavailable"
    assert response.headers["Retry-After"]
    # and a query's own failure stays a 500
    assert client.post("/internal/writes/divide", headers=AUTH).status_code == 500
