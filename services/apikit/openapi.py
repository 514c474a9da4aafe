"""What a route declares for the OpenAPI document: :func:`describe` its body, query and answers.

Views declare what they take and answer with :func:`describe`, next to the route; the
assembly's document (``services.app.api.openapi_document``) walks every registered route and
reads these declarations, so request and response schemas come from the pydantic models that
validate them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from services.apikit.auth import is_protected

View = TypeVar("View", bound=Callable[..., Any])
ResponseSpec = tuple[str, type[BaseModel] | None]
#: A body model, or a function of the current app that builds it (an enqueue body depends on
#: the registered families).
BodySpec = type[BaseModel] | Callable[[], type[BaseModel]]

_ATTRIBUTE = "__openapi__"


@dataclass(frozen=True)
class RouteDoc:
    """What one view takes and answers.

    Attributes:
      summary: one line.
      description: longer text (Markdown).
      body: the JSON request body's model.
      form: the ``multipart/form-data`` body's model (files as ``bytes`` fields).
      query: the query string's model (flat fields only).
      responses: status -> (description, body model or None).
      needs_services: the route reads Redis or PostgreSQL (so may answer 503).
    """

    summary: str
    description: str = ""
    body: BodySpec | None = None
    form: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    responses: Mapping[int, ResponseSpec] = field(default_factory=dict)
    needs_services: bool = True


def describe(
    summary: str,
    *,
    description: str = "",
    body: BodySpec | None = None,
    form: type[BaseModel] | None = None,
    query: type[BaseModel] | None = None,
    responses: Mapping[int, ResponseSpec] | None = None,
    needs_services: bool = True,
) -> Callable[[View], View]:
    """Attach a :class:`RouteDoc` to a view (put it below the route decorator)."""

    def attach(view: View) -> View:
        doc = RouteDoc(
            summary, description, body, form, query, dict(responses or {}), needs_services
        )
        setattr(view, _ATTRIBUTE, doc)
        return view

    return attach


#: Blueprints whose public routes need an organization's API key (``apiKeyAuth``).
_API_KEY_BLUEPRINTS: set[str] = set()


def document_api_key_auth(blueprint_name: str) -> None:
    """Describe every non-``/internal`` route of a blueprint as needing an API key."""
    _API_KEY_BLUEPRINTS.add(blueprint_name)


def needs_api_key(operation_endpoint: str, path: str) -> bool:
    """Whether the route of ``operation_endpoint`` at ``path`` is documented as needing an
    organization's API key (see :func:`document_api_key_auth`)."""
    blueprint_name = operation_endpoint.rsplit(".", 1)[0] if "." in operation_endpoint else ""
    return blueprint_name in _API_KEY_BLUEPRINTS and not is_protected(path)


def route_doc(view: Callable[..., Any]) -> RouteDoc | None:
    doc = getattr(view, _ATTRIBUTE, None)
    return doc if isinstance(doc, RouteDoc) else None
