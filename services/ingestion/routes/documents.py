"""Document routes: add (upload, text or URL), list, read, delete, retry.

Uploads answer 202 with the document in ``processing`` once it is committed, then enqueue
its ingestion job (``ingest-document-<id>``) so upload-to-ready is fast. When the queue is
unavailable the answer is still 202 (``enqueued: false``): the document is durable in
PostgreSQL and the minute sweep tick enqueues every document in ``processing``.

Body limits: the app's ``MAX_CONTENT_LENGTH`` (``SPEEDTIER_API_MAX_BODY_BYTES``) applies
everywhere but the upload route, whose limit is the 10 MB content limit plus room for the
multipart envelope or JSON escaping (:data:`UPLOAD_BODY_LIMIT`), set per request
(:func:`allow_uploads`).
"""

from __future__ import annotations

from flask import request
from flask.typing import ResponseReturnValue

from services.apikit.openapi import describe
from services.apikit.schemas import ErrorBody
from services.apikit.validation import parse_fields
from services.ingestion import store
from services.ingestion.api_auth import current_organization_id
from services.ingestion.families import ingest_request
from services.ingestion.inputs import document_input
from services.ingestion.routes.context import (
    AUTH,
    MISSING,
    NAME,
    answer,
    commit_and_enqueue,
    ingestion_unit,
    next_after,
    query_args,
    request_session,
)
from services.ingestion.schemas import (
    DocumentAccepted,
    DocumentJsonCreate,
    DocumentOut,
    DocumentPage,
    DocumentPageQuery,
    FileUploadForm,
)
from shared.db.models.ingestion import MAX_SOURCE_BYTES
from shared.errors import ValidationFailed

#: The upload route's body limit: the content limit plus the multipart envelope (or JSON
#: escaping of a text); content over 10 MB inside it is refused by the store (also 413).
UPLOAD_BODY_LIMIT = MAX_SOURCE_BYTES + 1024 * 1024


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
    return answer(DocumentPage(documents=found, next_after=next_after(found, query.limit)))


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


def allow_uploads() -> None:
    """The upload route takes bodies up to :data:`UPLOAD_BODY_LIMIT`."""
    if request.endpoint == f"{NAME}.{add_document.__name__}":
        request.max_content_length = UPLOAD_BODY_LIMIT
