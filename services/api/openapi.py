"""The OpenAPI 3.1 document of the internal API, built from the app's own routes.

Views declare what they take and answer with :func:`describe`; the document walks
``app.url_map``, so every registered route appears (an undescribed one with its name only)
and request and response schemas come from the pydantic models that validate them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Literal, TypeVar

from flask import Blueprint, Flask, current_app, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from werkzeug.routing import Rule

from services.api.auth import is_protected
from services.api.schemas import ErrorBody, InvalidRequestBody

View = TypeVar("View", bound=Callable[..., Any])
Mode = Literal["validation", "serialization"]
ResponseSpec = tuple[str, type[BaseModel] | None]

_ATTRIBUTE = "__openapi__"
_CACHE_KEY = "speedtier.openapi"
_IGNORED_METHODS = frozenset({"HEAD", "OPTIONS"})
_ARGUMENT = re.compile(r"<(?:[^<>:]+:)?([^<>]+)>")


@dataclass(frozen=True)
class RouteDoc:
    """What one view takes and answers.

    Attributes:
      summary: one line.
      description: longer text (Markdown).
      body: the JSON request body's model.
      query: the query string's model (flat fields only).
      responses: status -> (description, body model or None).
    """

    summary: str
    description: str = ""
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    responses: Mapping[int, ResponseSpec] = field(default_factory=dict)


def describe(
    summary: str,
    *,
    description: str = "",
    body: type[BaseModel] | None = None,
    query: type[BaseModel] | None = None,
    responses: Mapping[int, ResponseSpec] | None = None,
) -> Callable[[View], View]:
    """Attach a :class:`RouteDoc` to a view (put it below the route decorator)."""

    def attach(view: View) -> View:
        doc = RouteDoc(summary, description, body, query, dict(responses or {}))
        setattr(view, _ATTRIBUTE, doc)
        return view

    return attach


#: Blueprints whose public routes need an organization's API key (``apiKeyAuth``).
_API_KEY_BLUEPRINTS: set[str] = set()


def document_api_key_auth(blueprint_name: str) -> None:
    """Describe every non-``/internal`` route of a blueprint as needing an API key."""
    _API_KEY_BLUEPRINTS.add(blueprint_name)


def _needs_api_key(operation_endpoint: str, path: str) -> bool:
    blueprint_name = operation_endpoint.rsplit(".", 1)[0] if "." in operation_endpoint else ""
    return blueprint_name in _API_KEY_BLUEPRINTS and not is_protected(path)


def route_doc(view: Callable[..., Any]) -> RouteDoc | None:
    doc = getattr(view, _ATTRIBUTE, None)
    return doc if isinstance(doc, RouteDoc) else None


def openapi_path(rule: str) -> str:
    """``/internal/jobs/<job_id>`` -> ``/internal/jobs/{job_id}``."""
    return _ARGUMENT.sub(r"{\1}", rule)


def _responses(path: str, doc: RouteDoc) -> dict[int, ResponseSpec]:
    """The view's own responses plus the ones every route of its kind can give."""
    implied: dict[int, ResponseSpec] = {}
    if doc.body is not None or doc.query is not None:
        implied[400] = ("Invalid request; nothing was changed.", InvalidRequestBody)
    if doc.body is not None:
        implied[413] = ("The body is over the size limit.", ErrorBody)
    if is_protected(path):
        implied[401] = ("Missing or wrong bearer token.", ErrorBody)
    return {**implied, **doc.responses}


@dataclass
class _Operation:
    rule: Rule
    method: str
    path: str
    doc: RouteDoc

    def models(self) -> list[tuple[type[BaseModel], Mode]]:
        found: list[tuple[type[BaseModel], Mode]] = []
        if self.doc.body is not None:
            found.append((self.doc.body, "validation"))
        found += [(m, "serialization") for _, m in _responses(self.path, self.doc).values() if m]
        return found


def _parameters(operation: _Operation) -> list[dict[str, Any]]:
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in sorted(operation.rule.arguments)
    ]
    if operation.doc.query is not None:
        schema = operation.doc.query.model_json_schema()
        required = set(schema.get("required", []))
        for name, field_schema in schema.get("properties", {}).items():
            parameter = {"name": name, "in": "query", "required": name in required}
            if "description" in field_schema:
                parameter["description"] = field_schema.pop("description")
            parameters.append({**parameter, "schema": field_schema})
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
            if _needs_api_key(endpoint, operation.path)
            else []
        ),
    }
    if doc.description:
        result["description"] = doc.description
    parameters = _parameters(operation)
    if parameters:
        result["parameters"] = parameters
    if doc.body is not None:
        result["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": refs[(doc.body, "validation")]}},
        }
    responses: dict[str, Any] = {}
    for status, (description, model) in sorted(_responses(operation.path, doc).items()):
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


def build_document(app: Flask) -> dict[str, Any]:
    """The OpenAPI 3.1 document of every route registered on ``app``."""
    operations: list[_Operation] = []
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: (r.rule, r.endpoint)):
        view = app.view_functions[rule.endpoint]
        doc = route_doc(view) or RouteDoc(summary=rule.endpoint)
        path = openapi_path(rule.rule)
        methods = sorted((rule.methods or set()) - _IGNORED_METHODS)
        operations += [_Operation(rule, method, path, doc) for method in methods]

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
            "description": "Enqueue routes for the main application, job lookup, health. "
            "Every /internal route needs `Authorization: Bearer <INTERNAL_API_TOKEN>`.",
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
@describe("This document", responses={200: ("The OpenAPI 3.1 document.", None)})
def openapi_document() -> ResponseReturnValue:
    document = current_app.extensions.get(_CACHE_KEY)
    if document is None:
        document = current_app.extensions[_CACHE_KEY] = build_document(current_app)
    return jsonify(document)
