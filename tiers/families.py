"""A family: one kind of job with its own queue per tier, id format and policies.

Services describe their families with this type and register them at bootstrap; the platform
reads only what is here (the tier table supplies only the provider -> tier data).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tiers.policies import DEFAULT_RETRY, RetryPolicy, WindowRule
from tiers.table import DEFAULT_TIER, TIERS, queue_name, tier_for_provider

if TYPE_CHECKING:  # a worker never validates params: it does not import pydantic
    from pydantic import BaseModel

DAY_SECONDS = 86_400.0


@dataclass(frozen=True)
class Family:
    """Everything the platform needs to route, run and police one job family.

    Attributes:
      name: queue family and Dramatiq actor name (``kb_document_sync``); queues are
        ``<name>.<tier>``.
      kind: the request kind Rails and ticks send (``sync_document``).
      handler: the actor body, called with ``organization_id=...`` and the params' fields.
      params: the request parameters' model (``organization_id`` is not part of it), or a
        ``"package.module:Model"`` reference to it, imported by :meth:`params_model` when a
        request is first validated: a worker process, which never validates params, then
        imports neither the model's module nor pydantic (about 10 MiB of a worker's memory).
      job_id: the deterministic job id of ``(organization_id, params)``.
      fixed_tier: the tier every job runs in; when None the tier follows ``provider``.
      provider: the provider a job calls, from its params (routes it and keys its window).
      window_scope: the window's scope below the provider (an organization data source id).
      pause_flag: the Flipper flag that pauses the family (``pause_api2_...``).
      retry: attempts and backoff.
      retention_seconds: how long a finished job's record is kept (24 h by default).
      keep_finished: a finished id dedupes during its retention instead of being replaced
        (ticks by slot, ids pinned for a retention window).
      group_by: ``organization`` caps each organization's concurrency; ``global`` caps the
        family as a whole (a queue limiter's concurrency).
      windows: provider (or ``*``) -> fixed window every start must fit in.
      time_limit_seconds: a run longer than this is interrupted and retried.
      group_caps: tier -> per-group cap; a tier missing here (or None) has no group cap.
      run_tiers: the tiers a provider-routed family runs in (empty: every tier); a provider
        the table puts elsewhere runs in the table's default tier.
      tenant_scoped: requests carry a positive ``organization_id`` (platform ticks do not).
      priority: the actor's priority inside a worker: of the messages a worker has fetched
        (its queues' prefetch), a lower number runs first (Dramatiq's; default 0), so a
        latency-bound family is not queued in the worker behind another's backlog.
    """

    name: str
    kind: str
    handler: Callable[..., Any]
    params: type[BaseModel] | str
    job_id: Callable[[int, Any], str]
    fixed_tier: str | None = None
    provider: Callable[[Any], str | None] | None = None
    window_scope: Callable[[int, Any], str] | None = None
    pause_flag: str | None = None
    retry: RetryPolicy = DEFAULT_RETRY
    retention_seconds: float = DAY_SECONDS
    keep_finished: bool = False
    group_by: Literal["organization", "global"] = "organization"
    windows: Mapping[str, WindowRule] = field(default_factory=dict)
    time_limit_seconds: float = 600.0
    tenant_scoped: bool = True
    group_caps: Mapping[str, int] | None = None
    run_tiers: tuple[str, ...] = ()
    priority: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.params, str):
            module, _, name = self.params.partition(":")
            if not module or not name:
                raise ValueError(
                    f"family {self.name}: params reference {self.params!r} is not "
                    "'package.module:Model'"
                )

    def params_model(self) -> type[BaseModel]:
        """The params model, imported on first use when :attr:`params` is a reference."""
        if isinstance(self.params, str):
            return _import_model(self.name, self.params)
        return self.params

    def provider_of(self, params: Any) -> str | None:
        return self.provider(params) if self.provider else None

    def tier_of(self, params: Any) -> str:
        if self.fixed_tier:
            return self.fixed_tier
        tier = tier_for_provider(self.provider_of(params))
        return tier if not self.run_tiers or tier in self.run_tiers else DEFAULT_TIER

    def queue_of(self, params: Any) -> str:
        return queue_name(self.name, self.tier_of(params))

    def queues(self) -> list[str]:
        """Every queue this family may use."""
        tiers = [self.fixed_tier] if self.fixed_tier else list(self.run_tiers or TIERS)
        return [queue_name(self.name, tier) for tier in tiers if tier]

    def group_key(self, organization_id: int, tier: str) -> tuple[str, int] | None:
        """``(group key, cap)`` for a job, or None when the family has no cap in that tier."""
        cap = (self.group_caps or {}).get(tier)
        if cap is None:
            return None
        owner = "*" if self.group_by == "global" else str(organization_id)
        return f"{queue_name(self.name, tier)}|{owner}", cap

    def window_for(
        self, provider: str | None, overrides: Mapping[str, WindowRule]
    ) -> WindowRule | None:
        """The window a start must fit in; configuration overrides win over the family's."""
        name = (provider or "*").lower()
        for key in (f"{self.name}.{name}", f"{self.name}.*"):
            if key in overrides:
                return overrides[key]
        return self.windows.get(name) or self.windows.get("*")


@functools.cache
def _import_model(family: str, reference: str) -> type[BaseModel]:
    from pydantic import BaseModel

    module_name, _, name = reference.partition(":")
    try:
        model = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise LookupError(
            f"family {family}: params {reference!r} cannot be imported: {exc}"
        ) from exc
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"family {family}: params {reference!r} is not a pydantic model")
    return model


def family_of(message: Any, families: Mapping[str, Family]) -> Family | None:
    """The family a message belongs to (its actor name), or None for an unknown actor."""
    return families.get(message.actor_name)
