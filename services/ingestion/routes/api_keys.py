"""``POST /internal/ingestion/api_keys``: the main application provisions an organization's
ingestion API key (behind the internal bearer token, not an API key)."""

from __future__ import annotations

from flask.typing import ResponseReturnValue

from services.apikit.openapi import describe
from services.apikit.validation import parse_json
from services.ingestion import store
from services.ingestion.account_schemas import ApiKeyCreate, ApiKeyCreated
from services.ingestion.inputs import json_body
from services.ingestion.routes.context import answer, request_session


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
