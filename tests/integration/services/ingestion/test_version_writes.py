"""A document's version row is one ``INSERT``; the prune of old versions is sent only once a
version can be old enough to go, and then removes exactly those."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session

from services.ingestion import store
from services.ingestion.store.versions import RETAINED_SNAPSHOTS
from tests.integration.services.ingestion.factories import new_org, new_text_document

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _statements_of_add_version(
    session: Session, org: int, document_id: int, version: int
) -> list[str]:
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement.split()[0])

    engine = session.get_bind().engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        store.add_version(
            session,
            organization_id=org,
            document_id=document_id,
            version=version,
            content=f"text of version {version}",
            content_hash=f"{version:064d}",
            now=NOW,
        )
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return statements


def test_versions_are_one_insert_each_until_one_can_go_then_the_oldest_goes(
    session: Session,
) -> None:
    org = new_org()
    document_id = new_text_document(session, org, "doc", "text")
    # Given versions 1 to 11: the current one and ten superseded, none old enough to go
    for version in range(1, RETAINED_SNAPSHOTS + 2):
        assert _statements_of_add_version(session, org, document_id, version) == ["INSERT"]
    # When version 12 is written, version 1 is one too many: the prune is sent
    assert _statements_of_add_version(session, org, document_id, 12) == ["INSERT", "DELETE"]
    # Then the current version and ten superseded ones are kept, each with its text
    versions = store.list_versions(session, organization_id=org, document_id=document_id)
    assert [v.version for v in versions] == list(range(12, 1, -1))
    kept = store.get_version(session, organization_id=org, document_id=document_id, version=2)
    assert kept.content == "text of version 2"
