"""What every ingestion view works with: the chunk/embed component, a session or a unit of
work of the platform, the JSON answer, and the responses the OpenAPI document shares."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from flask import Response, current_app, jsonify, request
from pydantic import BaseModel
from sqlalchemy.orm import Session

from router.unit_of_work import UnitOfWork, unit_of_work
from services.apikit.context import current_platform
from services.apikit.errors import REDIS_UNAVAILABLE
from services.apikit.openapi import ResponseSpec
from services.apikit.schemas import ErrorBody
from services.indexing.embedders import Embedder
from services.indexing.index_writer import DocumentChunker
from services.ingestion.connector_sync.adapters import KbConnector
from shared.credentials import CredentialBox
from shared.db.engine import session_scope
from shared.errors import QueueUnavailable

log = logging.getLogger(__name__)

#: The blueprint's name, the prefix of its endpoints.
NAME = "ingestion"
COMPONENTS = "speedtier.ingestion"
BASE = "/knowledge-bases/<id:knowledge_base_id>"
DOCUMENT = f"{BASE}/documents/<id:document_id>"
CONNECTION = "/connections/<id:connection_id>"
BINDING = f"{BASE}/connectors/<id:binding_id>"
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
    """The chunk/embed component the routes share with the ingestion jobs, and the
    connectors' credentials box and adapters."""

    chunker: DocumentChunker
    embedder: Embedder
    credentials: CredentialBox = field(default_factory=CredentialBox)
    connectors: Mapping[str, KbConnector] = field(default_factory=dict)


def components() -> Components:
    found = current_app.extensions[COMPONENTS]
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


class _Identified(Protocol):
    @property
    def id(self) -> int: ...


def next_after(page: Sequence[_Identified], limit: int) -> int | None:
    """The keyset cursor of the page after a full ``page``; None after the last one."""
    return page[-1].id if len(page) == limit else None
