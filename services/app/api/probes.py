"""``/healthz`` (the process answers) and ``/readyz`` (Redis and PostgreSQL answer).

Both are open (no token): orchestrator probes call them.
"""

from __future__ import annotations

import logging

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue

from services.apikit.context import current_platform
from services.apikit.openapi import describe
from services.app.api.schemas import Liveness, Readiness
from services.app.readiness import check_readiness, is_ready

log = logging.getLogger(__name__)

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
@describe(
    "Liveness: the process answers", responses={200: ("Alive.", Liveness)}, needs_services=False
)
def healthz() -> ResponseReturnValue:
    return jsonify(Liveness().model_dump())


@blueprint.get("/readyz")
@describe(
    "Readiness: Redis and PostgreSQL are reachable",
    responses={200: ("Ready.", Readiness), 503: ("A dependency is unreachable.", Readiness)},
)
def readyz() -> ResponseReturnValue:
    checks = check_readiness(current_platform())
    for name, error in checks.items():
        if error is not None:
            log.warning("readiness: %s unreachable: %s", name, error)
    ready = is_ready(checks)
    body = Readiness(
        status="ready" if ready else "not_ready",
        checks={name: "ok" if error is None else "unreachable" for name, error in checks.items()},
    )
    return jsonify(body.model_dump()), 200 if ready else 503
