"""Job requests and their validation into routed, identified jobs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from router.registry import Registry
from shared.errors import ValidationFailed
from tiers.families import Family

#: Record ids are PostgreSQL bigints.
MAX_ID = 2**63 - 1


@dataclass(frozen=True)
class JobRequest:
    """One unit of work asked for: a kind, the organization it belongs to, its parameters."""

    kind: str
    organization_id: int | None
    params: Mapping[str, Any]


@dataclass(frozen=True)
class RoutedJob:
    """A validated request with everything the queue needs."""

    family: Family
    organization_id: int | None
    params: BaseModel
    job_id: str
    tier: str
    queue: str
    provider: str | None


def _field_errors(error: ValidationError, prefix: str) -> dict[str, str]:
    errors: dict[str, str] = {}
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"])
        errors[f"{prefix}{path}" if path else prefix.rstrip(".")] = item["msg"]
    return errors


def route(registry: Registry, request: JobRequest, *, prefix: str = "") -> RoutedJob:
    """Validate a request and resolve family, tier, queue and job id.

    Raises:
      ValidationFailed: unknown kind, a bad organization id, or invalid parameters; the
        errors name each field (prefixed with ``prefix``).
    """
    family = registry.by_kind(request.kind)
    if family is None:
        known = ", ".join(registry.kinds()) or "none registered"
        raise ValidationFailed({f"{prefix}kind": f"unknown kind {request.kind!r} (known: {known})"})
    org = request.organization_id
    if family.tenant_scoped:
        if isinstance(org, bool) or not isinstance(org, int) or not 1 <= org <= MAX_ID:
            raise ValidationFailed(
                {f"{prefix}organization_id": f"must be an integer from 1 to {MAX_ID}"}
            )
    elif org is not None:
        raise ValidationFailed({f"{prefix}organization_id": f"{request.kind} is not per tenant"})
    try:
        params = family.params_model().model_validate(dict(request.params))
    except ValidationError as exc:
        raise ValidationFailed(_field_errors(exc, prefix)) from None
    tier = family.tier_of(params)
    return RoutedJob(
        family=family,
        organization_id=request.organization_id,
        params=params,
        job_id=family.job_id(org or 0, params),
        tier=tier,
        queue=family.queue_of(params),
        provider=family.provider_of(params),
    )


def route_all(registry: Registry, requests: Sequence[JobRequest]) -> list[RoutedJob]:
    """Validate every request; on any failure raise one ValidationFailed naming every bad
    item as ``requests[i].field``, so a batch is accepted whole or not at all."""
    routed: list[RoutedJob] = []
    errors: dict[str, str] = {}
    for index, request in enumerate(requests):
        try:
            routed.append(route(registry, request, prefix=f"requests[{index}]."))
        except ValidationFailed as exc:
            errors.update(exc.errors)
    if errors:
        raise ValidationFailed(errors)
    return routed
