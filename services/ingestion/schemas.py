"""Request and response bodies of the ingestion API (seed 003).

The same models validate requests and describe them in the OpenAPI document. Requests are
strict (no coercion, no unknown fields) so a wrong type is a 400 naming the field, never a
silently converted value; strings and integers follow :mod:`shared.inputs` (no NUL,
lengths as sent then trimmed, ``5.0`` is an integer).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from services.apikit.schemas import StrictRequest
from services.web.urls import HTTP_URL
from shared.db.models.ingestion import KbDocument, KbDocumentVersion, KnowledgeBase
from shared.errors import ValidationFailed
from shared.inputs import MAX_ID, NUL_FREE, TRIMMED, WHOLE_NUMBER, JsonInt

MAX_NAME_LENGTH = 255
MAX_CRAWL_DEPTH = 5
MAX_AUDIENCE = 100
MAX_QUERY_LENGTH = 2000
MAX_TOP_K = 50
MAX_PAGE = 100

MAX_CONNECTOR = 200
MAX_URL_LENGTH = 2048
MAX_VERSION = 2**31 - 1

HttpUrlText = Annotated[
    str,
    Field(min_length=1, max_length=MAX_URL_LENGTH, description="An absolute http(s) URL."),
    HTTP_URL,
]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH), TRIMMED]
AudienceEntry = Annotated[str, Field(min_length=1, max_length=200), TRIMMED]
Audience = Annotated[
    list[AudienceEntry],
    Field(
        max_length=MAX_AUDIENCE,
        description="Who may retrieve the document; empty: everyone in the organization.",
    ),
]
Connector = Annotated[str, Field(min_length=1, max_length=MAX_CONNECTOR), NUL_FREE]
Version = Annotated[int, Field(ge=1, le=MAX_VERSION), WHOLE_NUMBER]
RefreshSchedule = Literal["hourly", "daily", "weekly"]
DocumentStatus = Literal["processing", "ready", "failed"]
VersionCause = Literal["upload", "recrawl", "refresh", "connector", "feed", "rollback"]


# -- knowledge bases -----------------------------------------------------------------------


class KnowledgeBaseCreate(StrictRequest):
    name: Name
    refresh_schedule: RefreshSchedule | None = Field(
        None,
        description="Re-fetch the base's URL documents on this cadence (with exponential "
        "backoff on failure); none: the platform's recrawl interval only.",
    )


class KnowledgeBaseOut(BaseModel):
    id: int
    name: str
    refresh_schedule: RefreshSchedule | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, base: KnowledgeBase) -> KnowledgeBaseOut:
        return cls.model_validate(_columns(base, cls.model_fields))


class KnowledgeBasePage(BaseModel):
    knowledge_bases: list[KnowledgeBaseOut]
    next_after: int | None = Field(
        description="Pass as ``after`` for the next page; null on the last page."
    )


class PageQuery(BaseModel):
    """Keyset paging by id (query strings are text: numbers are parsed, not strict)."""

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(50, ge=1, le=MAX_PAGE, description="Items per page (1 to 100).")
    after: int | None = Field(None, ge=1, le=MAX_ID, description="The last id of the page before.")


class DocumentPageQuery(PageQuery):
    status: DocumentStatus | None = Field(None, description="Only documents in this status.")


# -- documents -----------------------------------------------------------------------------


class DocumentJsonCreate(StrictRequest):
    """A JSON document: ``text`` (with a ``name``) or ``url`` (name defaults to the URL).

    A file is uploaded as ``multipart/form-data`` instead: ``file``, optional ``name``
    (default: the file name) and ``audience`` (comma-separated or repeated).
    """

    # The rules across fields (checked_document_json), in the document too.
    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {
                    "title": "a text document",
                    "required": ["text", "name"],
                    "properties": {
                        "text": {"not": {"type": "null"}},
                        "name": {"not": {"type": "null"}},
                        "url": {"type": "null"},
                        "connector": {"type": "null"},
                    },
                    "not": {"required": ["crawl_depth"]},
                },
                {
                    "title": "a URL document",
                    "required": ["url"],
                    "properties": {"url": {"not": {"type": "null"}}, "text": {"type": "null"}},
                },
            ]
        }
    )

    name: Name | None = None
    text: Annotated[str, Field(min_length=1), NUL_FREE] | None = None
    url: HttpUrlText | None = None
    crawl_depth: JsonInt = Field(0, ge=0, le=MAX_CRAWL_DEPTH, description="Same-host link depth.")
    connector: Connector | None = Field(
        None, description="The connector binding the URL document came through."
    )
    audience: Audience = []


class FileUploadFields(StrictRequest):
    """The form fields next to an uploaded ``file``."""

    name: Name | None = None
    audience: Audience = []


class UploadedFile(StrictRequest):
    """What a multipart file part says about itself, stored with the document."""

    filename: Annotated[str, NUL_FREE] | None = None
    content_type: Annotated[str, NUL_FREE] | None = None


#: One ``audience`` form part: entries separated by commas (each trimmed, a blank one
#: ignored), at most :data:`MAX_AUDIENCE` entries of at most 200 characters, no NUL.
AUDIENCE_TEXT_PATTERN = rf"^[^,\x00]{{0,200}}(?:,[^,\x00]{{0,200}}){{0,{MAX_AUDIENCE - 1}}}$"
#: A repeated ``audience`` part holding one entry.
AUDIENCE_PART_PATTERN = r"^[^,\x00]{0,200}$"


def _form_audience(schema: dict[str, Any]) -> None:
    """A form field is text on the wire: ``audience`` is one comma-separated part or
    repeated parts of one entry each, what :func:`services.ingestion.inputs.file_input` reads."""
    schema["properties"]["audience"] = {
        "description": "Who may retrieve the document (empty: everyone in the organization): "
        "comma-separated in one part, or one entry per repeated part.",
        "anyOf": [
            {"type": "string", "pattern": AUDIENCE_TEXT_PATTERN},
            {
                "type": "array",
                "maxItems": MAX_AUDIENCE,
                "items": {"type": "string", "pattern": AUDIENCE_PART_PATTERN},
            },
        ],
    }


class FileUploadForm(FileUploadFields):
    """``multipart/form-data``: a ``file`` part, ``name`` (default: the file's name) and
    ``audience`` (repeated, or comma-separated)."""

    model_config = ConfigDict(json_schema_extra=_form_audience)

    file: bytes = Field(min_length=1, description="The document's bytes (1 byte to 10 MB).")


class DocumentOut(BaseModel):
    id: int
    knowledge_base_id: int
    name: str
    kind: Literal["file", "text", "url"]
    status: DocumentStatus
    failure_reason: str | None
    current_version: int = Field(description="0 until the first version is indexed.")
    content_type: str | None
    filename: str | None
    url: str | None
    crawl_depth: int
    connector: str | None
    audience: list[str]
    attempts: int
    submitted_at: datetime
    ready_at: datetime | None
    failed_at: datetime | None
    last_fetched_at: datetime | None
    next_refresh_at: datetime | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, document: KbDocument) -> DocumentOut:
        return cls.model_validate(_columns(document, cls.model_fields))


class DocumentAccepted(DocumentOut):
    """202: the document is durably stored in ``processing``."""

    replaced: bool = Field(description="A live document of that name was replaced in place.")
    enqueued: bool = Field(
        description="Its ingestion job is queued; false when the queue was unavailable, in "
        "which case the platform's minute sweep picks the document up."
    )

    @classmethod
    def of_stored(
        cls, document: DocumentOut, *, replaced: bool, enqueued: bool
    ) -> DocumentAccepted:
        return cls(**dict(document), replaced=replaced, enqueued=enqueued)


class DocumentPage(BaseModel):
    documents: list[DocumentOut]
    next_after: int | None = Field(
        description="Pass as ``after`` for the next page; null on the last page."
    )


def _columns(record: object, names: Iterable[str]) -> dict[str, object]:
    return {name: getattr(record, name) for name in names}


# -- versions ------------------------------------------------------------------------------


class VersionOut(BaseModel):
    version: int
    content_hash: str
    created_at: datetime
    is_current: bool
    cause: VersionCause | None = Field(
        description="What made this content current: `upload` (the API), `recrawl` (the "
        "platform's re-fetch), `refresh` (the base's refresh schedule), `connector` (a "
        "connector sync), `feed` (a feed read), `rollback`; null for versions written "
        "before causes were recorded."
    )

    @classmethod
    def of(cls, version: KbDocumentVersion, current: int) -> VersionOut:
        return cls(
            version=version.version,
            content_hash=version.content_hash,
            created_at=version.created_at,
            is_current=version.version == current,
            cause=version.cause,
        )


class VersionList(BaseModel):
    """The current version and up to ten superseded ones, newest first."""

    versions: list[VersionOut]


class DiffQuery(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    from_version: int = Field(alias="from", ge=1, le=MAX_VERSION, description="The old version.")
    to_version: int = Field(alias="to", ge=1, le=MAX_VERSION, description="The new version.")


class VersionDiff(BaseModel):
    from_version: int
    to_version: int
    diff: str = Field(description="A unified diff of the two versions' extracted text.")


class RollbackBody(StrictRequest):
    version: Version = Field(description="A kept version's number.")


# -- search --------------------------------------------------------------------------------


class SearchBody(StrictRequest):
    query: Annotated[str, Field(min_length=1, max_length=MAX_QUERY_LENGTH), TRIMMED]
    top_k: JsonInt = Field(10, ge=1, le=MAX_TOP_K)
    audience: Audience = Field(
        [],
        description="The caller's audiences: chunks restricted to other audiences are left "
        "out; chunks without an audience are always visible.",
    )


class SearchHitOut(BaseModel):
    document_id: int
    chunk_id: int
    knowledge_base_id: int
    score: float
    snippet: str = Field(description="The best-matching fragments (matches in **), or the start.")
    content: str = Field(description="The chunk's whole text, to ground an answer on.")
    document_name: str = Field(description="The name of the document the chunk belongs to.")
    document_version: int = Field(
        description="The document version the chunk was indexed from (its current version)."
    )
    position: int = Field(description="The chunk's 0-based position in its document.")


class SearchResults(BaseModel):
    hits: list[SearchHitOut]


# -- cross-field rules ----------------------------------------------------------------


def checked_document_json(body: DocumentJsonCreate) -> DocumentJsonCreate:
    """The rules across fields: exactly one of ``text`` and ``url``; a text needs a name;
    crawl options only with a URL. Raises ValidationFailed."""
    errors: dict[str, str] = {}
    if (body.text is None) == (body.url is None):
        errors["body"] = "give either text or url (or upload a file as multipart/form-data)"
    elif body.text is not None:
        if body.name is None:
            errors["name"] = "Field required"
        if "crawl_depth" in body.model_fields_set:
            errors["crawl_depth"] = "only for a url document"
        if body.connector is not None:
            errors["connector"] = "only for a url document"
    if errors:
        raise ValidationFailed(errors)
    return body
