"""The enqueue route every service shares: parse a batch, enqueue it, answer 202.

A service exposes its own ``/internal/<service>/enqueue`` in one line::

    blueprint = enqueue_blueprint(
        "knowledge_base_sync", "/internal/knowledge_base_sync", KINDS, "Enqueue sync units"
    )
    # in register(platform): platform.add_blueprint(blueprint)

or, next to other routes of its blueprint, with a view that returns
``enqueue_requests(KINDS)`` under ``@describe_enqueue(...)``.

A batch is accepted whole or not at all: every item is validated before any is enqueued, a
202 means every job is durably in Redis, and an unreachable Redis answers 503.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import asdict

from flask import Blueprint, jsonify, request
from flask.typing import ResponseReturnValue
from pydantic import ValidationError

from router.requests import JobRequest
from services.api.context import current_platform
from services.api.errors import validation_failed
from services.api.openapi import ResponseSpec, View, describe
from services.api.schemas import EnqueueAccepted, EnqueueBody, EnqueuedJob, ErrorBody
from shared.errors import ValidationFailed

ENQUEUE_RESPONSES: dict[int, ResponseSpec] = {
    202: ("Every job is durably in Redis; one answer per request, in order.", EnqueueAccepted),
    503: ("Redis is unreachable; nothing can be assumed accepted, retry later.", ErrorBody),
}


def parse_enqueue_body(raw: bytes, kinds: Collection[str] | None = None) -> list[JobRequest]:
    """Validate an enqueue body's shape and kinds into job requests.

    Parameters:
      raw: the request body (JSON, whatever the declared content type).
      kinds: the kinds this route accepts; None accepts every registered kind.

    Raises:
      ValidationFailed: with a message per field path (``requests[0].organization_id``).
    """
    try:
        body = EnqueueBody.model_validate_json(raw, strict=True)
    except ValidationError as exc:
        raise validation_failed(exc) from None
    if kinds is not None:
        accepted = ", ".join(sorted(kinds))
        errors = {
            f"requests[{index}].kind": f"kind {item.kind!r} is not accepted here ({accepted})"
            for index, item in enumerate(body.requests)
            if item.kind not in kinds
        }
        if errors:
            raise ValidationFailed(errors)
    return [JobRequest(item.kind, item.organization_id, item.params()) for item in body.requests]


#: A service's hook that completes requests before routing (e.g. looks up each record's
#: provider so the router can pick its tier); it must keep order and count.
Prepare = Callable[[list[JobRequest]], list[JobRequest]]


def enqueue_requests(
    kinds: Collection[str] | None = None, prepare: Prepare | None = None
) -> ResponseReturnValue:
    """The body of an enqueue view: parse the request, enqueue through the router, 202."""
    requests = parse_enqueue_body(request.get_data(cache=False), kinds)
    if prepare is not None:
        requests = prepare(requests)
    jobs = current_platform().router.enqueue_many(requests)
    answer = EnqueueAccepted(jobs=[EnqueuedJob.model_validate(asdict(job)) for job in jobs])
    return jsonify(answer.model_dump(mode="json")), 202


def describe_enqueue(summary: str, kinds: Collection[str] | None = None) -> Callable[[View], View]:
    """The OpenAPI description of an enqueue view accepting ``kinds``."""
    listed = ", ".join(f"`{kind}`" for kind in sorted(kinds)) if kinds else "any registered kind"
    return describe(
        summary,
        description=f"Kinds: {listed}. Each request's other fields are the kind's parameters. "
        "The batch is validated whole before anything is enqueued; an id already waiting, "
        "delayed or running is deduplicated.",
        body=EnqueueBody,
        responses=ENQUEUE_RESPONSES,
    )


def enqueue_blueprint(
    name: str,
    url_prefix: str,
    kinds: Collection[str],
    summary: str,
    prepare: Prepare | None = None,
) -> Blueprint:
    """A blueprint with one route, ``POST <url_prefix>/enqueue``, accepting ``kinds``
    (completed by ``prepare`` before routing, when given)."""
    blueprint = Blueprint(name, __name__, url_prefix=url_prefix)
    accepted = frozenset(kinds)

    @blueprint.post("/enqueue")
    @describe_enqueue(summary, accepted)
    def enqueue() -> ResponseReturnValue:
        return enqueue_requests(accepted, prepare)

    return blueprint
