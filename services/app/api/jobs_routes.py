"""Platform routes under ``/internal/jobs``: enqueue any registered kind, look a job up."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, request
from flask.typing import ResponseReturnValue
from werkzeug.routing import BaseConverter

from services.apikit.auth_throttle import checks_auth_throttle
from services.apikit.context import current_platform
from services.apikit.enqueue import EnqueueContract, describe_enqueue, enqueue_requests
from services.apikit.errors import error_response
from services.apikit.openapi import describe
from services.apikit.schemas import ErrorBody
from services.apikit.validation import parse_fields
from services.app.api.schemas import JobQuery, JobRecord

blueprint = Blueprint("jobs", __name__, url_prefix="/internal/jobs")


class JobIdConverter(BaseConverter):
    """``<job_id:...>``: any one path segment but ``enqueue``, so ``/internal/jobs/enqueue``
    is the enqueue route alone (its ``Allow`` lists POST, not the lookup's GET) and no job id
    is ever that word (none of the deterministic id formats is)."""

    regex = r"(?!enqueue$)[^/]+"
    #: The path parameter's schema in the OpenAPI document.
    json_schema: dict[str, Any] = {"type": "string", "minLength": 1, "not": {"const": "enqueue"}}
    description = "The job's id (its deterministic id, e.g. kb-document-sync-42)."


ANY_KIND = EnqueueContract("EnqueueBody")


@blueprint.post("/enqueue")
@describe_enqueue("Enqueue jobs of any registered kind", ANY_KIND)
@checks_auth_throttle
def enqueue() -> ResponseReturnValue:
    return enqueue_requests(ANY_KIND)


@blueprint.get("/<job_id:job_id>")
@describe(
    "A job's record",
    description="Finished jobs are kept for their family's retention (24 h by default).",
    query=JobQuery,
    responses={
        200: ("The job's current record.", JobRecord),
        404: ("No such job, or one of another organization.", ErrorBody),
        405: ("`enqueue`: the enqueue route's path, which takes POST only.", ErrorBody),
        503: ("Redis is unreachable.", ErrorBody),
    },
)
def show(job_id: str) -> ResponseReturnValue:
    query = parse_fields(JobQuery, request.args.to_dict())
    record = job_record(job_id, current_platform().brokers.record(job_id))
    if record is None or query.organization_id not in (None, record.organization_id):
        return error_response(404, "not_found", message=f"no job {job_id!r}")
    return jsonify(record.model_dump(mode="json"))


def job_record(job_id: str, raw: dict[str, str] | None) -> JobRecord | None:
    """The job store's string hash as a typed record."""
    if raw is None:
        return None

    def number(key: str) -> int | None:
        value = raw.get(key, "")
        return int(value) if value.lstrip("-").isdigit() else None

    return JobRecord(
        job_id=job_id,
        state=raw.get("state", "unknown"),
        family=raw.get("family") or None,
        queue=raw.get("queue") or None,
        organization_id=number("org"),
        attempts=number("attempts") or 0,
        failures=number("failures") or 0,
        created_at_ms=number("created_at"),
        started_at_ms=number("started_at"),
        finished_at_ms=number("finished_at"),
        last_error=raw.get("last_error") or None,
    )
