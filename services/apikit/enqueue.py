"""The enqueue route every service shares: parse a batch, enqueue it, answer 202.

A service exposes its own ``/internal/<service>/enqueue`` in one line::

    blueprint = enqueue_blueprint(
        "knowledge_base_sync", "/internal/knowledge_base_sync", KINDS, "Enqueue sync units"
    )
    # in register(platform): platform.add_blueprint(blueprint)

A batch is accepted whole or not at all: every item is validated before any is enqueued, a
202 means every job is durably in Redis, and a batch on one Redis is one transaction. An
unreachable or full Redis answers 503 (nothing enqueued, or exactly the requests listed in
``accepted`` when the call spanned several round trips), and a Redis that took the requests
without answering answers 504 ``enqueue_outcome_unknown`` (the requests in ``unknown`` may
or may not be enqueued; sending them again is safe).

The body is validated against one model per route, built from the registered families: each
kind's request is ``kind``, ``organization_id`` (an id for tenant kinds, ``null`` for platform
kinds such as ticks) and the kind's parameter model, strict (``"42"`` is not a number, unknown
fields are refused). The OpenAPI document shows the same model, a ``oneOf`` by ``kind``.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, cast

from flask import Blueprint, jsonify, request
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, Field, ValidationError, create_model

from router.registry import Registry
from router.requests import JobRequest
from services.apikit.auth_throttle import (
    checks_auth_throttle,
    deferred_guard,
    guard_checked,
    refused_by_guard,
)
from services.apikit.context import current_platform
from services.apikit.errors import field_path
from services.apikit.openapi import ResponseSpec, View, describe
from services.apikit.schemas import (
    MAX_REQUESTS_PER_CALL,
    EnqueueAccepted,
    EnqueueRefused,
    ErrorBody,
    OrganizationId,
    StrictRequest,
)
from shared import metrics
from shared.errors import ConflictingFields, QueueUnavailable, ValidationFailed, WindowFull
from shared.inputs import CONFLICTING

ENQUEUE_RESPONSES: dict[int, ResponseSpec] = {
    202: ("Every job is durably in Redis; one answer per request, in order.", EnqueueAccepted),
    409: (
        "A request's fields contradict each other (a pinned id naming another record): "
        "`conflicting_fields`, `fields` naming each; nothing was enqueued.",
        ErrorBody,
    ),
    503: (
        "Redis is unreachable, read-only (`queue_unavailable`) or out of memory "
        "(`queue_full`): nothing was enqueued but the requests in `accepted`; send again after "
        "Retry-After.",
        EnqueueRefused,
    ),
    504: (
        "`enqueue_outcome_unknown`: Redis took the requests in `unknown` and did not answer; "
        "they may or may not be enqueued. Sending them again is safe (deterministic job ids "
        "deduplicate a job still waiting, delayed or running).",
        EnqueueRefused,
    ),
}
_ENVELOPE = frozenset({"kind", "organization_id"})
_TAG_ERRORS = frozenset({"union_tag_invalid", "union_tag_not_found"})


@functools.cache
def request_model(kind: str, params: type[BaseModel], tenant_scoped: bool) -> type[BaseModel]:
    """One kind's request as the API takes it: its parameters plus ``kind`` and
    ``organization_id``, strict."""
    organization: Any = OrganizationId if tenant_scoped else None
    return create_model(
        "".join(part.capitalize() for part in _words(kind)) + "Request",
        __base__=(params, StrictRequest),
        __doc__=f"A `{kind}` request.",
        kind=(cast(Any, Literal)[kind], ...),
        organization_id=(
            organization,
            Field(
                description="The tenant the work belongs to."
                if tenant_scoped
                else "Always null: this work belongs to no tenant."
            ),
        ),
    )


def _words(kind: str) -> list[str]:
    return [w for w in kind.replace(":", "_").replace("-", "_").split("_") if w]


@functools.cache
def _body_model(name: str, items: tuple[type[BaseModel], ...]) -> type[BaseModel]:
    item: Any = Annotated[Union[items], Field(discriminator="kind")]  # noqa: UP007
    return create_model(
        name,
        __base__=StrictRequest,
        __doc__="A batch, accepted whole or not at all.",
        requests=(list[item], Field(min_length=1, max_length=MAX_REQUESTS_PER_CALL)),
    )


@dataclass(frozen=True)
class EnqueueContract:
    """What one enqueue route accepts.

    Attributes:
      body_name: the name of its body's schema in the OpenAPI document.
      kinds: the kinds it accepts; None: every registered kind.
    """

    body_name: str
    kinds: frozenset[str] | None = None
    #: (kind, parameters model) pairs this route narrows a kind's parameters to (a subclass
    #: of the family's model), so its document says what it accepts.
    params: tuple[tuple[str, type[BaseModel]], ...] = ()

    def body_model(self) -> type[BaseModel]:
        """The body model of the current app's registered (and accepted) kinds."""
        registry = current_platform().router.registry
        # Families are only ever added: the count of them identifies the registry's state.
        # Sorting and looking up every family's model per request cost more than the JSON
        # validation of a one-request body.
        key = (self, len(registry.by_name()))
        models = _BODY_MODELS.setdefault(registry, {})
        model = models.get(key)
        if model is None:
            model = models[key] = self._build_body_model(registry)
        return model

    def _build_body_model(self, registry: Registry) -> type[BaseModel]:
        families = sorted(registry, key=lambda family: family.kind)
        narrowed = dict(self.params)
        items = tuple(
            request_model(
                family.kind, narrowed.get(family.kind, family.params_model()), family.tenant_scoped
            )
            for family in families
            if self.kinds is None or family.kind in self.kinds
        )
        if not items:
            raise RuntimeError(f"{self.body_name}: none of its kinds is registered")
        return _body_model(self.body_name, items)

    def parse(self, raw: bytes) -> list[JobRequest]:
        """Validate an enqueue body into job requests.

        Raises:
          ValidationFailed: with a message per field path (``requests[0].organization_id``).
          ConflictingFields: every error is a field contradicting another (a pinned id).
        """
        try:
            body = self.body_model().model_validate_json(raw)
        except ValidationError as exc:
            errors = self._errors(exc)
            if all(item["type"] == CONFLICTING for item in exc.errors(include_url=False)):
                raise ConflictingFields(errors) from None
            raise ValidationFailed(errors) from None
        return [
            JobRequest(
                item.kind,
                item.organization_id,
                item.model_dump(mode="json", exclude_unset=True, exclude=set(_ENVELOPE)),
            )
            for item in body.requests  # type: ignore[attr-defined]
        ]

    def _errors(self, error: ValidationError) -> dict[str, str]:
        fields: dict[str, str] = {}
        for item in error.errors(include_url=False):
            location = item["loc"]
            if item["type"] in _TAG_ERRORS:
                path, message = f"{field_path(location)}.kind", self._kind_error(item["input"])
            else:
                if location[:1] == ("requests",) and len(location) > 2:
                    location = location[:2] + location[3:]  # drop the union's tag
                path, message = field_path(location), item["msg"]
            fields.setdefault(path, message)
        return fields

    def _kind_error(self, given: Any) -> str:
        kind = given.get("kind") if isinstance(given, dict) else None
        if isinstance(given, dict) and "kind" not in given:
            return "Field required"
        if not isinstance(kind, str):
            return "Input should be a valid string"
        registered = current_platform().router.registry.kinds()
        if kind in registered and self.kinds is not None:
            return f"kind {kind!r} is not accepted here ({', '.join(sorted(self.kinds))})"
        return f"unknown kind {kind!r} (known: {', '.join(registered) or 'none registered'})"


#: Each registry's body models, by (contract, number of families registered).
_BODY_MODELS: weakref.WeakKeyDictionary[
    Registry, dict[tuple[EnqueueContract, int], type[BaseModel]]
] = weakref.WeakKeyDictionary()

ENQUEUE_SECONDS = metrics.histogram(
    "enqueue_seconds",
    "Time an enqueue route took, from reading the body to the router's answer.",
    ["route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)

#: A service's hook that completes requests before routing (e.g. looks up each record's
#: provider so the router can pick its tier); it must keep order and count.
Prepare = Callable[[list[JobRequest]], list[JobRequest]]


def enqueue_requests(
    contract: EnqueueContract, prepare: Prepare | None = None
) -> ResponseReturnValue:
    """The body of an enqueue view: parse the request, enqueue through the router, 202."""
    route = request.url_rule.rule if request.url_rule is not None else request.path
    with ENQUEUE_SECONDS.labels(route).time():
        requests = contract.parse(request.get_data(cache=False))
        if prepare is not None:
            requests = prepare(requests)
        try:
            # The failed-authentication throttle, when the bearer check left it to this call.
            jobs = current_platform().router.enqueue_many(requests, deferred_guard())
        except WindowFull as full:
            return refused_by_guard(full)
        except QueueUnavailable as failed:
            if failed.accepted or failed.unknown:  # the guarded call ran, or may have
                guard_checked()
            raise
        guard_checked()
    # EnqueueAccepted's shape, built directly (the router's answers are already plain strings
    # of the right values; validating them again through pydantic cost as much as parsing).
    answer = {
        "jobs": [
            {"job_id": job.job_id, "outcome": job.outcome, "queue": job.queue, "kind": job.kind}
            for job in jobs
        ]
    }
    return jsonify(answer), 202


def describe_enqueue(summary: str, contract: EnqueueContract) -> Callable[[View], View]:
    """The OpenAPI description of an enqueue view under ``contract``."""
    kinds = contract.kinds
    listed = ", ".join(f"`{kind}`" for kind in sorted(kinds)) if kinds else "any registered kind"
    return describe(
        summary,
        description=f"Kinds: {listed}. Each request's other fields are the kind's parameters. "
        "The batch is validated whole before anything is enqueued; an id already waiting, "
        "delayed or running is deduplicated.",
        body=contract.body_model,
        responses=ENQUEUE_RESPONSES,
    )


def enqueue_blueprint(
    name: str,
    url_prefix: str,
    kinds: Collection[str],
    summary: str,
    prepare: Prepare | None = None,
    params: Mapping[str, type[BaseModel]] | None = None,
) -> Blueprint:
    """A blueprint with one route, ``POST <url_prefix>/enqueue``, accepting ``kinds``
    (completed by ``prepare`` before routing, when given), with ``params`` narrowing a kind's
    parameters on this route."""
    blueprint = Blueprint(name, __name__, url_prefix=url_prefix)
    body_name = "".join(part.capitalize() for part in _words(name)) + "EnqueueBody"
    narrowed = tuple(sorted((params or {}).items()))
    contract = EnqueueContract(body_name, frozenset(kinds), narrowed)

    @blueprint.post("/enqueue")
    @describe_enqueue(summary, contract)
    @checks_auth_throttle
    def enqueue() -> ResponseReturnValue:
        return enqueue_requests(contract, prepare)

    return blueprint
