"""A document upload's request as the store takes it: a multipart file, or JSON text or URL.

Every field goes through the ingestion schemas (:mod:`.schemas`), so an upload follows the
API's input rules (no NUL in a name, an audience, a file name or a part's content type; a
400 naming the field); a zero-byte file is refused before anything is stored.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from flask import request

from services.apikit.validation import parse_fields, parse_json
from services.ingestion import store
from services.ingestion.schemas import (
    DocumentJsonCreate,
    FileUploadFields,
    UploadedFile,
    checked_document_json,
)
from services.web.urls import normalize_url
from shared.errors import ValidationFailed

_FORM_FIELDS = frozenset({"name", "audience"})


@dataclass(frozen=True)
class DocumentInput:
    name: str
    source: store.DocumentSource
    audience: list[str]
    connector: str | None = None


def json_body() -> bytes:
    """The raw JSON body. Raises ValidationFailed for another content type."""
    if not request.is_json:
        raise ValidationFailed({"body": "the body must be application/json"})
    return request.get_data(cache=False)


def file_input() -> DocumentInput:
    """A ``multipart/form-data`` upload. Raises ValidationFailed (a zero-byte file too:
    nothing is stored for it)."""
    errors = {f: "unknown field" for f in (set(request.form) - _FORM_FIELDS)}
    errors |= {f: "unknown file field" for f in set(request.files) - {"file"}}
    audience = [
        part.strip() for value in request.form.getlist("audience") for part in value.split(",")
    ]
    fields = parse_fields(
        FileUploadFields,
        {"name": request.form.get("name"), "audience": [a for a in audience if a]},
    )
    uploads = request.files.getlist("file")
    data = b""
    if not uploads:
        errors["file"] = "Field required (a file part)"
    elif len(uploads) > 1:
        errors["file"] = "one file per request"
    else:
        data = uploads[0].read()
        if not data:
            errors["file"] = "zero-byte file"
    if errors:
        raise ValidationFailed(errors)
    upload = uploads[0]
    try:
        part = parse_fields(
            UploadedFile, {"filename": upload.filename, "content_type": upload.content_type}
        )
    except ValidationFailed as exc:
        raise ValidationFailed({f"file.{f}": m for f, m in exc.errors.items()}) from None
    filename = posixpath.basename((part.filename or "").replace("\\", "/"))
    name = fields.name or filename.strip()
    if not name:
        raise ValidationFailed({"name": "Field required (the file has no name to default to)"})
    source = store.FileSource(data, part.content_type or None, filename or None)
    return DocumentInput(name[: store.MAX_NAME_LENGTH], source, fields.audience)


def json_input() -> DocumentInput:
    """A JSON text or URL document. Raises ValidationFailed."""
    body = checked_document_json(parse_json(DocumentJsonCreate, json_body()))
    if body.text is not None:
        assert body.name is not None
        return DocumentInput(body.name, store.TextSource(body.text), body.audience)
    assert body.url is not None
    source = store.UrlSource(body.url, body.crawl_depth)
    name = body.name or normalize_url(body.url) or body.url
    return DocumentInput(name[: store.MAX_NAME_LENGTH], source, body.audience, body.connector)


def document_input() -> DocumentInput:
    """The upload of the current request, in whichever form it came. Raises
    ValidationFailed."""
    if request.mimetype == "multipart/form-data":
        return file_input()
    if request.is_json:
        return json_input()
    raise ValidationFailed(
        {"body": "send multipart/form-data with a file, or JSON with a text or a url"}
    )
