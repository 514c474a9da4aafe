"""Search routes: one knowledge base, or every base of the key's organization."""

from __future__ import annotations

from flask import Response
from flask.typing import ResponseReturnValue

from services.apikit.openapi import describe
from services.apikit.validation import parse_json
from services.ingestion import store
from services.ingestion.api_auth import current_organization_id
from services.ingestion.inputs import json_body
from services.ingestion.routes.context import (
    AUTH,
    EMBEDDER,
    MISSING,
    answer,
    components,
    request_session,
)
from services.ingestion.schemas import SearchBody, SearchHitOut, SearchResults


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
            content=hit.content,
            document_name=hit.document_name,
            document_version=hit.document_version,
            position=hit.position,
        )
        for hit in hits
    ]
    return answer(SearchResults(hits=found))


_SEARCH_DESCRIPTION = (
    "Hybrid search (vector and full text, fused by rank) over each live document's current "
    "version (a re-uploaded document answers with its previous version until the new one is "
    "ready): the top-k chunks, best first, each with its score, snippet, whole text, and its "
    "document's id, name and version (enough for a search_knowledge tool to ground an "
    "answer and cite it). Only the "
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
