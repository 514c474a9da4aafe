"""Version routes: a document's kept versions, a diff between two, a rollback to one."""

from __future__ import annotations

import difflib
from typing import Any

from flask.typing import ResponseReturnValue

from services.apikit.openapi import describe
from services.apikit.schemas import ErrorBody
from services.apikit.validation import parse_fields, parse_json
from services.ingestion import rollback, store
from services.ingestion.api_auth import current_organization_id
from services.ingestion.families import ingest_request
from services.ingestion.inputs import json_body
from services.ingestion.routes.context import (
    AUTH,
    MISSING,
    answer,
    commit_and_enqueue,
    components,
    ingestion_unit,
    query_args,
    request_session,
)
from services.ingestion.schemas import (
    DiffQuery,
    DocumentAccepted,
    DocumentOut,
    RollbackBody,
    VersionDiff,
    VersionList,
    VersionOut,
)
from shared.db.base import utcnow


@describe(
    "A document's kept versions",
    responses={
        200: ("The current version and up to ten superseded ones.", VersionList),
        **AUTH,
        **MISSING,
    },
)
def list_versions(knowledge_base_id: int, document_id: int) -> ResponseReturnValue:
    scope: dict[str, Any] = {
        "organization_id": current_organization_id(),
        "document_id": document_id,
        "knowledge_base_id": knowledge_base_id,
    }
    with request_session() as session:
        current = store.get_document(session, **scope).current_version
        versions = [VersionOut.of(v, current) for v in store.list_versions(session, **scope)]
    return answer(VersionList(versions=versions))


@describe(
    "A unified diff between two kept versions",
    query=DiffQuery,
    responses={200: ("The diff of the versions' extracted text.", VersionDiff), **AUTH, **MISSING},
)
def diff_versions(knowledge_base_id: int, document_id: int) -> ResponseReturnValue:
    query = parse_fields(DiffQuery, query_args())
    scope: dict[str, Any] = {
        "organization_id": current_organization_id(),
        "document_id": document_id,
        "knowledge_base_id": knowledge_base_id,
    }
    with request_session() as session:
        old = store.get_version(session, version=query.from_version, **scope)
        new = store.get_version(session, version=query.to_version, **scope)
        lines = difflib.unified_diff(
            old.content.splitlines(),
            new.content.splitlines(),
            fromfile=f"version {query.from_version}",
            tofile=f"version {query.to_version}",
            lineterm="",
        )
        diff = "\n".join(lines)
    return answer(
        VersionDiff(from_version=query.from_version, to_version=query.to_version, diff=diff)
    )


@describe(
    "Roll a document back to a kept version",
    description="The version's text becomes the document's source and the document goes back "
    "to `processing` (answered 202, like an upload): its ingestion job re-indexes it in one "
    "replacement, as a new current version (history records what replaced what); search "
    "answers from the current version meanwhile. Rolling a ready document back to its "
    "current content changes nothing (200).",
    body=RollbackBody,
    responses={
        200: ("Nothing to do: the version is already current; the document.", DocumentOut),
        202: ("Back in `processing` with the restored content.", DocumentAccepted),
        409: ("The document is being ingested; retry once it is ready or failed.", ErrorBody),
        **AUTH,
        **MISSING,
    },
)
def rollback_document(knowledge_base_id: int, document_id: int) -> ResponseReturnValue:
    body = parse_json(RollbackBody, json_body())
    organization_id = current_organization_id()
    parts = components()
    with ingestion_unit() as uow:
        session = uow.session
        store.get_document(
            session,
            organization_id=organization_id,
            document_id=document_id,
            knowledge_base_id=knowledge_base_id,
        )
        queued = rollback.request_rollback(
            session,
            organization_id=organization_id,
            document_id=document_id,
            version=body.version,
            chunker=parts.chunker,
            embedder=parts.embedder,
            now=utcnow(),
        )
        if queued:
            uow.enqueue(ingest_request(organization_id, document_id, knowledge_base_id))
        enqueued = commit_and_enqueue(uow, document_id)
        document = DocumentOut.of(
            store.get_document(session, organization_id=organization_id, document_id=document_id)
        )
    if not queued:
        return answer(document)
    return answer(DocumentAccepted.of_stored(document, replaced=False, enqueued=enqueued), 202)
