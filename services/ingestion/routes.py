"""The ingestion API (seed 003): knowledge bases, documents, versions and search.

Public routes, each authenticated by an organization's API key (:mod:`.api_auth`), every
query scoped to that organization: another organization's ids answer 404 exactly like
missing ones. One internal route, ``POST /internal/ingestion/api_keys``, lets the main
application provision keys (behind the internal bearer token).

Uploads answer 202 with the document in ``processing`` once it is committed, then enqueue
its ingestion job (``ingest-document-<id>``) so upload-to-ready is fast. When the queue is
unavailable the answer is still 202 (``enqueued: false``): the document is durable in
PostgreSQL and the minute sweep tick enqueues every document in ``processing``.

Body limits: the app's ``MAX_CONTENT_LENGTH`` (``SPEEDTIER_API_MAX_BODY_BYTES``) applies
everywhere but the upload route, whose limit is the 10 MB content limit plus room for the
multipart envelope or JSON escaping (:data:`UPLOAD_BODY_LIMIT`), set per request.
"""

from __future__ import annotations

import difflib
import logging
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request
from flask.sansio.blueprints import BlueprintSetupState
from flask.typing import ResponseReturnValue
from pydantic import BaseModel
from sqlalchemy.orm import Session
from werkzeug.exceptions import RequestEntityTooLarge

from router.unit_of_work import UnitOfWork, unit_of_work
from services.apikit.context import current_platform
from services.apikit.errors import REDIS_UNAVAILABLE, RETRY_AFTER_SECONDS, error_response
from services.apikit.openapi import ResponseSpec, describe
from services.apikit.schemas import ErrorBody
from services.apikit.validation import parse_fields, parse_json
from services.indexing.embedders import Embedder
from services.indexing.index_writer import DocumentChunker
from services.ingestion import rollback, store
from services.ingestion.api_auth import current_organization_id, require_api_key
from services.ingestion.families import ingest_request
from services.ingestion.inputs import document_input, json_body
from services.ingestion.schemas import (
    ApiKeyCreate,
    ApiKeyCreated,
    DiffQuery,
    DocumentAccepted,
    DocumentJsonCreate,
    DocumentOut,
    DocumentPage,
    DocumentPageQuery,
    FileUploadForm,
    KnowledgeBaseCreate,
    KnowledgeBaseOut,
    KnowledgeBasePage,
    PageQuery,
    RollbackBody,
    SearchBody,
    SearchHitOut,
    SearchResults,
    VersionDiff,
    VersionList,
    VersionOut,
)
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.db.models.ingestion import MAX_SOURCE_BYTES
from shared.errors import Delay, QueueUnavailable, RecordMissing, Retryable, ValidationFailed

log = logging.getLogger(__name__)

NAME = "ingestion"
#: The upload route's body limit: the content limit plus the multipart envelope (or JSON
#: escaping of a text); content over 10 MB inside it is refused by the store (also 413).
UPLOAD_BODY_LIMIT = MAX_SOURCE_BYTES + 1024 * 1024
_COMPONENTS = "speedtier.ingestion"
_BASE = "/knowledge-bases/<id:knowledge_base_id>"
_DOCUMENT = f"{_BASE}/documents/<id:document_id>"
#: The public path space, every path of which needs an API key (unrouted ones too).
PUBLIC_PATHS = ("/knowledge-bases", "/search")
QUEUE_UNAVAILABLE: tuple[type[Exception], ...] = (QueueUnavailable, *REDIS_UNAVAILABLE)

AUTH: dict[int, ResponseSpec] = {401: ("Missing, unknown or revoked API key.", ErrorBody)}
MISSING: dict[int, ResponseSpec] = {
    404: ("Not found in the key's organization (another organization's ids too).", ErrorBody)
}
EMBEDDER: dict[int, ResponseSpec] = {
    503: ("The embedding provider is rate-limited or unavailable; retry later.", ErrorBody)
}


@dataclass(frozen=True)
class Components:
    """The chunk/embed component the routes share with the ingestion jobs."""

    chunker: DocumentChunker
    embedder: Embedder


def components() -> Components:
    found = current_app.extensions[_COMPONENTS]
    assert isinstance(found, Components)
    return found


@contextmanager
def request_session() -> Iterator[Session]:
    """A session of the platform for a view that enqueues nothing; nothing is kept unless
    the view commits."""
    with session_scope(current_platform().sessions) as session:
        yield session


@contextmanager
def ingestion_unit() -> Iterator[UnitOfWork]:
    """A unit of work for a view that stores a document and enqueues its ingestion: the
    job is enqueued only once the document is committed."""
    platform = current_platform()
    with unit_of_work(platform.sessions, platform.router) as uow:
        yield uow


def commit_and_enqueue(uow: UnitOfWork, document_id: int) -> bool:
    """Commit the unit and enqueue its ingestion job; False when the queue is unavailable
    (the document is committed in ``processing``, so the sweep tick enqueues it instead)."""
    try:
        uow.commit()
    except QUEUE_UNAVAILABLE as exc:
        log.warning("document %s left to the sweep tick: enqueue failed: %s", document_id, exc)
        return False
    return True


def answer(model: BaseModel, status: int = 200, location: str | None = None) -> Response:
    response = jsonify(model.model_dump(mode="json"))
    response.status_code = status
    if location is not None:
        response.headers["Location"] = location
    return response


def query_args() -> dict[str, str]:
    return request.args.to_dict()


# -- knowledge bases -----------------------------------------------------------------------


@describe(
    "Create a knowledge base",
    body=KnowledgeBaseCreate,
    responses={201: ("The new knowledge base.", KnowledgeBaseOut), **AUTH},
)
def create_knowledge_base() -> ResponseReturnValue:
    body = parse_json(KnowledgeBaseCreate, json_body())
    with request_session() as session:
        base = store.create_knowledge_base(
            session,
            organization_id=current_organization_id(),
            name=body.name,
            refresh_schedule=body.refresh_schedule,
        )
        session.commit()
        created = KnowledgeBaseOut.of(base)
    return answer(created, 201, f"/knowledge-bases/{created.id}")


@describe(
    "List knowledge bases",
    query=PageQuery,
    responses={200: ("A page of knowledge bases, by id.", KnowledgeBasePage), **AUTH},
)
def list_knowledge_bases() -> ResponseReturnValue:
    query = parse_fields(PageQuery, query_args())
    with request_session() as session:
        bases = store.list_knowledge_bases(
            session,
            organization_id=current_organization_id(),
            limit=query.limit,
            after_id=query.after,
        )
        found = [KnowledgeBaseOut.of(b) for b in bases]
    next_after = found[-1].id if len(found) == query.limit else None
    return answer(KnowledgeBasePage(knowledge_bases=found, next_after=next_after))


@describe(
    "A knowledge base",
    responses={200: ("The knowledge base.", KnowledgeBaseOut), **AUTH, **MISSING},
)
def get_knowledge_base(knowledge_base_id: int) -> ResponseReturnValue:
    with request_session() as session:
        base = store.get_knowledge_base(
            session, organization_id=current_organization_id(), knowledge_base_id=knowledge_base_id
        )
        found = KnowledgeBaseOut.of(base)
    return answer(found)


@describe(
    "Delete a knowledge base",
    description="Its documents are deleted with it and their chunks leave search at once.",
    responses={204: ("Deleted.", None), **AUTH, **MISSING},
)
def delete_knowledge_base(knowledge_base_id: int) -> ResponseReturnValue:
    with request_session() as session:
        store.delete_knowledge_base(
            session, organization_id=current_organization_id(), knowledge_base_id=knowledge_base_id
        )
        session.commit()
    return "", 204


# -- documents -----------------------------------------------------------------------------


@describe(
    "Add a document (file upload, text or URL)",
    description="`multipart/form-data`: `file`, optional `name` (default: the file name) and "
    "`audience` (comma-separated or repeated). `application/json`: `{name, text, audience?}` "
    "or `{name?, url, crawl_depth?, connector?, audience?}`. A live document of the same name "
    "is replaced in place (same id; the superseded version is kept). Answered once the "
    "document is stored in `processing`; its ingestion job is enqueued at once, and if the "
    "queue is unavailable the platform's minute sweep picks it up. An unreadable, truncated "
    "or unsupported file is accepted and ends `failed` with a reason. Bodies up to 11 MB.",
    body=DocumentJsonCreate,
    form=FileUploadForm,
    responses={
        202: ("Stored in `processing`; ingestion is under way.", DocumentAccepted),
        413: ("The body or its content is over the 10 MB content limit.", ErrorBody),
        **AUTH,
        **MISSING,
    },
)
def add_document(knowledge_base_id: int) -> ResponseReturnValue:
    given = document_input()
    organization_id = current_organization_id()
    with ingestion_unit() as uow:
        try:
            added = store.add_document(
                uow.session,
                organization_id=organization_id,
                knowledge_base_id=knowledge_base_id,
                name=given.name,
                source=given.source,
                audience=given.audience,
                connector=given.connector,
            )
        except ValueError as exc:  # the store's own checks, should validation miss one
            raise ValidationFailed({"body": str(exc)}) from None
        uow.enqueue(ingest_request(organization_id, added.document.id, knowledge_base_id))
        enqueued = commit_and_enqueue(uow, added.document.id)
        document = DocumentOut.of(added.document)
    accepted = DocumentAccepted.of_stored(document, replaced=added.replaced, enqueued=enqueued)
    return answer(accepted, 202, f"/knowledge-bases/{knowledge_base_id}/documents/{document.id}")


@describe(
    "List a knowledge base's documents",
    query=DocumentPageQuery,
    responses={200: ("A page of documents, by id.", DocumentPage), **AUTH, **MISSING},
)
def list_documents(knowledge_base_id: int) -> ResponseReturnValue:
    query = parse_fields(DocumentPageQuery, query_args())
    with request_session() as session:
        documents = store.list_documents(
            session,
            organization_id=current_organization_id(),
            knowledge_base_id=knowledge_base_id,
            status=query.status,
            limit=query.limit,
            after_id=query.after,
        )
        found = [DocumentOut.of(d) for d in documents]
    next_after = found[-1].id if len(found) == query.limit else None
    return answer(DocumentPage(documents=found, next_after=next_after))


@describe(
    "A document: status, failure reason, timestamps, current version",
    responses={200: ("The document.", DocumentOut), **AUTH, **MISSING},
)
def get_document(knowledge_base_id: int, document_id: int) -> ResponseReturnValue:
    with request_session() as session:
        document = store.get_document(
            session,
            organization_id=current_organization_id(),
            document_id=document_id,
            knowledge_base_id=knowledge_base_id,
        )
        found = DocumentOut.of(document)
    return answer(found)


@describe(
    "Delete a document",
    description="Its chunks leave search at once; its name becomes free.",
    responses={204: ("Deleted.", None), **AUTH, **MISSING},
)
def delete_document(knowledge_base_id: int, document_id: int) -> ResponseReturnValue:
    with request_session() as session:
        store.delete_document(
            session,
            organization_id=current_organization_id(),
            document_id=document_id,
            knowledge_base_id=knowledge_base_id,
        )
        session.commit()
    return "", 204


@describe(
    "Retry a document's ingestion",
    description="Re-runs the ingestion against the same source bytes (a URL is fetched "
    "again) and replaces the outcome; a document still processing is left as it is.",
    responses={202: ("Back in `processing`.", DocumentAccepted), **AUTH, **MISSING},
)
def retry_document(knowledge_base_id: int, document_id: int) -> ResponseReturnValue:
    organization_id = current_organization_id()
    with ingestion_unit() as uow:
        retried = store.mark_for_retry(
            uow.session,
            organization_id=organization_id,
            document_id=document_id,
            knowledge_base_id=knowledge_base_id,
        )
        uow.enqueue(ingest_request(organization_id, document_id, knowledge_base_id))
        enqueued = commit_and_enqueue(uow, document_id)
        document = DocumentOut.of(retried)
    return answer(DocumentAccepted.of_stored(document, replaced=False, enqueued=enqueued), 202)


# -- versions ------------------------------------------------------------------------------


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


# -- search --------------------------------------------------------------------------------


def run_search(knowledge_base_id: int | None) -> Response:
    from services.ingestion.search import search

    body = parse_json(SearchBody, json_body())
    organization_id = current_organization_id()
    with request_session() as session:
        if knowledge_base_id is not None:
            store.get_knowledge_base(
                session, organization_id=organization_id, knowledge_base_id=knowledge_base_id
            )
        hits = search(
            session,
            organization_id=organization_id,
            knowledge_base_id=knowledge_base_id,
            query=body.query,
            top_k=body.top_k,
            audience=body.audience,
            embedder=components().embedder,
        )
    found = [
        SearchHitOut(
            document_id=hit.document_id,
            chunk_id=hit.chunk_id,
            knowledge_base_id=hit.knowledge_base_id,
            score=hit.score,
            snippet=hit.snippet,
        )
        for hit in hits
    ]
    return answer(SearchResults(hits=found))


_SEARCH_DESCRIPTION = (
    "Hybrid search (vector and full text, fused by rank) over each live document's current "
    "version (a re-uploaded document answers with its previous version until the new one is "
    "ready): the top-k chunks with scores, document ids and snippets, best first. Only the "
    "key's organization is searched; chunks restricted to audiences the caller did not name "
    "are left out."
)


@describe(
    "Search one knowledge base",
    description=_SEARCH_DESCRIPTION,
    body=SearchBody,
    responses={200: ("The best chunks.", SearchResults), **AUTH, **MISSING, **EMBEDDER},
)
def search_knowledge_base(knowledge_base_id: int) -> ResponseReturnValue:
    return run_search(knowledge_base_id)


@describe(
    "Search every knowledge base of the organization",
    description=_SEARCH_DESCRIPTION,
    body=SearchBody,
    responses={200: ("The best chunks.", SearchResults), **AUTH, **EMBEDDER},
)
def search_all() -> ResponseReturnValue:
    return run_search(None)


# -- internal: API keys --------------------------------------------------------------------


@describe(
    "Provision an organization's ingestion API key",
    description="The plain key is in this answer only; the platform stores its SHA-256.",
    body=ApiKeyCreate,
    responses={201: ("The new key.", ApiKeyCreated)},
)
def create_api_key() -> ResponseReturnValue:
    body = parse_json(ApiKeyCreate, json_body())
    with request_session() as session:
        key, plain = store.create_api_key(
            session, organization_id=body.organization_id, name=body.name
        )
        session.commit()
        created = ApiKeyCreated(
            id=key.id,
            organization_id=key.organization_id,
            name=key.name,
            key=plain,
            created_at=key.created_at,
        )
    response = answer(created, 201)
    response.headers["Cache-Control"] = "no-store"
    return response


# -- errors and limits ---------------------------------------------------------------------


def _not_found(exc: RecordMissing) -> Response:
    return error_response(404, "not_found", message=str(exc))


def _busy(exc: store.DocumentBusy) -> Response:
    return error_response(409, "conflict", message=str(exc))


def _content_too_large(exc: store.DocumentTooLarge) -> Response:
    return error_response(
        413, "payload_too_large", message="content over 10 MB", limit_bytes=MAX_SOURCE_BYTES
    )


def _body_too_large(exc: RequestEntityTooLarge) -> Response:
    limit = request.max_content_length
    return error_response(
        413, "payload_too_large", message=f"the body is over {limit} bytes", limit_bytes=limit
    )


def _embedder_unavailable(exc: Delay | Retryable) -> Response:
    log.warning("embedder unavailable, answering 503: %s", exc)
    response = error_response(
        503, "embedder_unavailable", message="the embedding provider is busy; retry later"
    )
    wait = RETRY_AFTER_SECONDS
    if isinstance(exc, Delay):
        wait = max(1, math.ceil(exc.until - time.time()))
    response.headers["Retry-After"] = str(wait)
    return response


def allow_uploads() -> None:
    """The upload route takes bodies up to :data:`UPLOAD_BODY_LIMIT`."""
    if request.endpoint == f"{NAME}.{add_document.__name__}":
        request.max_content_length = UPLOAD_BODY_LIMIT


_ROUTES: tuple[tuple[str, str, Callable[..., ResponseReturnValue]], ...] = (
    ("/knowledge-bases", "POST", create_knowledge_base),
    ("/knowledge-bases", "GET", list_knowledge_bases),
    (_BASE, "GET", get_knowledge_base),
    (_BASE, "DELETE", delete_knowledge_base),
    (f"{_BASE}/documents", "POST", add_document),
    (f"{_BASE}/documents", "GET", list_documents),
    (_DOCUMENT, "GET", get_document),
    (_DOCUMENT, "DELETE", delete_document),
    (f"{_DOCUMENT}/retry", "POST", retry_document),
    (f"{_DOCUMENT}/versions", "GET", list_versions),
    (f"{_DOCUMENT}/versions/diff", "GET", diff_versions),
    (f"{_DOCUMENT}/rollback", "POST", rollback_document),
    (f"{_BASE}/search", "POST", search_knowledge_base),
    ("/search", "POST", search_all),
    ("/internal/ingestion/api_keys", "POST", create_api_key),
)


def blueprint(*, chunker: DocumentChunker, embedder: Embedder) -> Blueprint:
    """The ingestion API, searching and rolling back with ``chunker`` and ``embedder``
    (the ones the ingestion jobs use, so vectors stay comparable)."""
    routes = Blueprint(NAME, __name__)
    require_api_key(routes, PUBLIC_PATHS)
    routes.before_request(allow_uploads)

    def attach(state: BlueprintSetupState) -> None:
        state.app.extensions[_COMPONENTS] = Components(chunker, embedder)

    routes.record_once(attach)
    routes.register_error_handler(RecordMissing, _not_found)
    routes.register_error_handler(store.DocumentBusy, _busy)
    routes.register_error_handler(store.DocumentTooLarge, _content_too_large)
    routes.register_error_handler(RequestEntityTooLarge, _body_too_large)
    routes.register_error_handler(Delay, _embedder_unavailable)
    routes.register_error_handler(Retryable, _embedder_unavailable)
    for rule, method, view in _ROUTES:
        routes.add_url_rule(rule, view_func=view, methods=[method])
    return routes
