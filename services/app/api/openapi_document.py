"""The OpenAPI 3.1 document of the internal API, built from the app's own routes.

The document walks ``app.url_map``, so every registered route appears (an undescribed one with
its name only), with what its view declared through :func:`services.apikit.openapi.describe`.
Path parameters take their schema from their converter (``<id:...>`` is an integer from 1),
and the answers every route of a kind can give are added to its own: 400 and 413 with a body
or query, 401 and 429 (failed authentications past the limit) behind a credential, 404 with
an id in the path, 503 when it needs Redis or PostgreSQL, and 414 on every route (gunicorn's
refusal of an over-long request line).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Literal

from flask import Blueprint, Flask, current_app, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from werkzeug.routing import Rule

from services.apikit.auth import is_protected
from services.apikit.openapi import ResponseSpec, RouteDoc, describe, needs_api_key, route_doc
from services.apikit.schemas import ErrorBody, InvalidRequestBody

Mode = Literal["validation", "serialization"]

_CACHE_KEY = "speedtier.openapi"
THROTTLED = (
    "Too many failed authentications from this address (SPEEDTIER_AUTH_FAILURE_RATE): the "
    "same answer whether the credential is right or wrong, and nothing was done. Retry after "
    "Retry-After."
)
_IGNORED_METHODS = frozenset({"HEAD", "OPTIONS"})
_ARGUMENT = re.compile(r"<(?:[^<>:]+:)?([^<>]+)>")


def openapi_path(rule: str) -> str:
    """``/internal/jobs/<job_id>`` -> ``/internal/jobs/{job_id}``."""
    return _ARGUMENT.sub(r"{\1}", rule)


@dataclass
class _Operation:
    rule: Rule
    method: str
    path: str
    doc: RouteDoc
    body: type[BaseModel] | None

    def has_ids(self) -> bool:
        return any(hasattr(c, "json_schema") for c in self.rule._converters.values())

    def responses(self) -> dict[int, ResponseSpec]:
        """The view's own responses plus the ones every route of its kind can give."""
        doc, implied = self.doc, dict[int, ResponseSpec]()
        if self.body is not None or doc.form is not None or doc.query is not None:
            implied[400] = ("Invalid request; nothing was changed.", InvalidRequestBody)
        if self.body is not None or doc.form is not None:
            implied[413] = ("The body is over the size limit.", ErrorBody)
        if is_protected(self.path):
            implied[401] = ("Missing or wrong bearer token.", ErrorBody)
            implied[429] = (THROTTLED, ErrorBody)
        elif needs_api_key(self.rule.endpoint, self.path):
            implied[401] = ("Missing, unknown or revoked API key.", ErrorBody)
            implied[429] = (THROTTLED, ErrorBody)
        if self.has_ids():
            implied[404] = ("Nothing of that id in the organization, or not an id.", ErrorBody)
        # gunicorn refuses an over-long request line before any route (JsonErrorsWorker).
        implied[414] = ("The request line is over the server's limit.", ErrorBody)
        if doc.needs_services:
            implied[503] = (
                "Redis or PostgreSQL is unreachable; retry after Retry-After.",
                ErrorBody,
            )
        return {**implied, **doc.responses}

    def models(self) -> list[tuple[type[BaseModel], Mode]]:
        found: list[tuple[type[BaseModel], Mode]] = []
        for model in (self.body, self.doc.form):
            if model is not None:
                found.append((model, "validation"))
        found += [(m, "serialization") for _, m in self.responses().values() if m]
        return found


def _path_parameter(rule: Rule, name: str) -> dict[str, Any]:
    converter = rule._converters.get(name)
    parameter: dict[str, Any] = {"name": name, "in": "path", "required": True}
    if converter is not None and hasattr(converter, "json_schema"):
        parameter["description"] = getattr(converter, "description", "")
        return {**parameter, "schema": dict(converter.json_schema)}
    return {**parameter, "schema": {"type": "string"}}


def _query_schema(field_schema: dict[str, Any]) -> dict[str, Any]:
    """A query field's schema: a query string cannot say null, so an optional field is its
    value's schema (left out means none)."""
    choices = field_schema.get("anyOf", [])
    values = [choice for choice in choices if choice.get("type") != "null"]
    if len(values) == 1 and len(values) < len(choices):
        rest = {k: v for k, v in field_schema.items() if k != "anyOf"}
        if rest.get("default") is None:
            rest.pop("default", None)
        field_schema = rest | values[0]
    return field_schema


def _parameters(operation: _Operation) -> list[dict[str, Any]]:
    rule = operation.rule
    parameters = [_path_parameter(rule, name) for name in sorted(rule.arguments)]
    if operation.doc.query is not None:
        schema = operation.doc.query.model_json_schema()
        required = set(schema.get("required", []))
        for name, field_schema in schema.get("properties", {}).items():
            parameter = {"name": name, "in": "query", "required": name in required}
            if "description" in field_schema:
                parameter["description"] = field_schema.pop("description")
            parameters.append({**parameter, "schema": _query_schema(field_schema)})
    return parameters


def _operation_object(
    operation: _Operation, refs: Mapping[tuple[Any, Mode], Any], operation_id: str
) -> dict[str, Any]:
    doc = operation.doc
    endpoint = operation.rule.endpoint
    result: dict[str, Any] = {
        "operationId": operation_id,
        "summary": doc.summary,
        "tags": [endpoint.rsplit(".", 1)[0] if "." in endpoint else "app"],
        "security": (
            [{"bearerAuth": []}]
            if is_protected(operation.path)
            else [{"apiKeyAuth": []}]
            if needs_api_key(endpoint, operation.path)
            else []
        ),
    }
    if doc.description:
        result["description"] = doc.description
    parameters = _parameters(operation)
    if parameters:
        result["parameters"] = parameters
    content: dict[str, Any] = {}
    if operation.body is not None:
        content["application/json"] = {"schema": refs[(operation.body, "validation")]}
    if doc.form is not None:
        content["multipart/form-data"] = {"schema": refs[(doc.form, "validation")]}
    if content:
        result["requestBody"] = {"required": True, "content": content}
    responses: dict[str, Any] = {}
    for status, (description, model) in sorted(operation.responses().items()):
        responses[str(status)] = {"description": description}
        if model is not None:
            schema = refs[(model, "serialization")]
            responses[str(status)]["content"] = {"application/json": {"schema": schema}}
    result["responses"] = responses or {"200": {"description": "OK"}}
    return result


def _version() -> str:
    try:
        return metadata.version("speedtier")
    except metadata.PackageNotFoundError:
        return "0.0.0+source"


#: Blueprints whose routes are pages for people, not API operations.
_NOT_API_BLUEPRINTS = frozenset({"dashboard"})


def build_document(app: Flask) -> dict[str, Any]:
    """The OpenAPI 3.1 document of every API route registered on ``app``.

    The operators' dashboard (HTML pages for people, its own sign-in and CSRF) is not part of
    the machine API and is left out; docs/operations/dashboard-overview.md documents it.
    """
    operations: list[_Operation] = []
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: (r.rule, r.endpoint)):
        if rule.endpoint.split(".", 1)[0] in _NOT_API_BLUEPRINTS:
            continue
        view = app.view_functions[rule.endpoint]
        doc = route_doc(view) or RouteDoc(summary=rule.endpoint)
        body = doc.body
        if body is not None and not isinstance(body, type):
            with app.app_context():
                body = body()
        path = openapi_path(rule.rule)
        methods = sorted((rule.methods or set()) - _IGNORED_METHODS)
        operations += [_Operation(rule, method, path, doc, body) for method in methods]

    models = list(dict.fromkeys(m for op in operations for m in op.models()))
    refs, definitions = models_json_schema(models, ref_template="#/components/schemas/{model}")

    per_endpoint = Counter(op.rule.endpoint for op in operations)
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        operation_id = op.rule.endpoint.replace(".", "_")
        if per_endpoint[op.rule.endpoint] > 1:
            operation_id += f"_{op.method.lower()}"
        paths.setdefault(op.path, {})[op.method.lower()] = _operation_object(op, refs, operation_id)

    return {
        "openapi": "3.1.0",
        "info": {
            "title": "speedtier internal API",
            "version": _version(),
            "description": "Enqueue routes for the main application, job lookup, health, and "
            "the ingestion API. Every /internal route needs `Authorization: Bearer "
            "<INTERNAL_API_TOKEN>`; the public ingestion routes an organization's API key, "
            "checked before anything else (401 first). Input rules, on every route: JSON "
            "bodies are strict (no string is read as a number, unknown fields are refused); "
            "an integer may be written `5` or `5.0`, not `5.5`; no string may contain NUL "
            "(U+0000): a 400 names the field; lengths count a string as sent, before "
            "surrounding whitespace is trimmed from names, audiences and queries; a path id is "
            "an integer from 1, anything else answers 404; a body over the limit is a 413, "
            "with or without Content-Length; 503 with Retry-After means Redis or PostgreSQL "
            "is unreachable.",
        },
        "paths": paths,
        "components": {
            "schemas": definitions.get("$defs", {}),
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer"},
                "apiKeyAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An organization's ingestion API key.",
                },
            },
        },
    }


blueprint = Blueprint("openapi", __name__)


@blueprint.get("/internal/openapi.json")
@describe(
    "This document", responses={200: ("The OpenAPI 3.1 document.", None)}, needs_services=False
)
def openapi_document() -> ResponseReturnValue:
    document = current_app.extensions.get(_CACHE_KEY)
    if document is None:
        document = current_app.extensions[_CACHE_KEY] = build_document(current_app)
    return jsonify(document)
