"""Knowledge-base routes: create, list, read, delete."""

from __future__ import annotations

from flask.typing import ResponseReturnValue

from services.apikit.openapi import describe
from services.apikit.validation import parse_fields, parse_json
from services.ingestion import store
from services.ingestion.api_auth import current_organization_id
from services.ingestion.inputs import json_body
from services.ingestion.routes.context import (
    AUTH,
    MISSING,
    answer,
    next_after,
    query_args,
    request_session,
)
from services.ingestion.schemas import (
    KnowledgeBaseCreate,
    KnowledgeBaseOut,
    KnowledgeBasePage,
    PageQuery,
)


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
    return answer(
        KnowledgeBasePage(knowledge_bases=found, next_after=next_after(found, query.limit))
    )


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
