"""The three super-source families on two tiers (seed 004's six queues).

=============  ==========================  ================  ==========================
family          unique by (job id)          concurrency       fast / slow
=============  ==========================  ================  ==========================
``super_import``  organization, connection,  per organization  1 / 1
                  root node
``super_index``   ... and the node           per organization  5 / 2
``super_webhook`` nothing (the delivery id   per family and    5 / 2
                  names the job; replays     tier (``group_by
                  are refused before)        ="global"``)
=============  ==========================  ================  ==========================

A webhook's nodes are indexed by ``super_index`` jobs (the seed's ``scheduleNodeIndexations``),
so they share the organization's index cap with its imports.

Queues are ``<family>.<tier>``; the tier follows the request's ``source`` through the tier
table (unknown: slow). Every family gets five attempts with the external-service backoff
(:data:`EXTERNAL_SERVICE_RETRY`) and keeps failed jobs for :data:`RETENTION_SECONDS`.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Field

from router.requests import JobRequest
from services.connectors.nodes import NodeRef
from shared.inputs import NUL_FREE, PARAMS_CONFIG, Id
from tiers.families import Family
from tiers.policies import RetryPolicy

if TYPE_CHECKING:
    from services.super_sources.actors import SuperSourceActors

PAUSE_FLAG = "pause_api2_super_sources"

#: The seed's ``externalServiceBackoffStrategy``: five attempts, waiting 15 s, 30 s, 60 s and
#: 120 s between them (a provider's 5xx or a timeout usually passes within minutes; a rate
#: limit is a Delay, not an attempt).
EXTERNAL_SERVICE_RETRY = RetryPolicy(
    max_attempts=5, backoff="exponential", base_seconds=15.0, max_backoff_seconds=600.0
)
#: The seed's ``removeOnFail: false``: a job's record (failed ones included) stays a week.
RETENTION_SECONDS = 7 * 86_400.0
#: Six queues: each family on the fast and the slow tier (never the maintenance tier).
RUN_TIERS = ("fast", "slow")
IMPORT_CAPS = {"fast": 1, "slow": 1}
INDEX_CAPS = {"fast": 5, "slow": 2}
WEBHOOK_CAPS = {"fast": 5, "slow": 2}
#: Webhook messages run before the other messages a worker has fetched (Dramatiq priority:
#: lower first; the others are 0).
WEBHOOK_PRIORITY = -10
#: An import walks a whole root in one job (its checkpoint survives a kill).
IMPORT_TIME_LIMIT_SECONDS = 3 * 3600.0

_Text = Annotated[str, NUL_FREE]
_KEY_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


class _Rooted(BaseModel):
    model_config = PARAMS_CONFIG

    source: _Text = Field(min_length=1, max_length=64)
    connection_id: Id
    root_node_type: _Text = Field(min_length=1, max_length=128)
    root_node_id: _Text = Field(min_length=1, max_length=2048)


class ImportParams(_Rooted):
    first_run: bool = False


class IndexParams(_Rooted):
    node_type: _Text = Field(min_length=1, max_length=128)
    node_id: _Text = Field(min_length=1, max_length=2048)
    #: The listing's last-modified time of the node, when it knew it: an unchanged node is
    #: skipped without a provider call.
    listed_date: datetime | None = None
    #: Scheduled by a webhook: the job may spend the quota its source keeps for webhooks.
    webhook: bool = False


class WebhookParams(BaseModel):
    model_config = PARAMS_CONFIG

    source: _Text = Field(min_length=1, max_length=64)
    path: _Text = Field(min_length=1, max_length=128)
    connection_id: Id
    delivery_id: _Text = Field(min_length=1, max_length=256)
    kind: _Text = Field("", max_length=128)
    refs: list[tuple[_Text, _Text]] = Field(default_factory=list, max_length=10_000)
    removed: list[tuple[_Text, _Text]] = Field(default_factory=list, max_length=10_000)
    root: tuple[_Text, _Text] | None = None
    received_at: float = Field(0.0, ge=0, allow_inf_nan=False)


def key_part(value: str) -> str:
    """``value`` as it appears in a job id: itself when short and plain, else a digest."""
    if len(value) <= 64 and set(value) <= _KEY_SAFE:
        return value
    return "h" + hashlib.sha256(value.encode()).hexdigest()[:32]


def import_job_id(organization_id: int, p: Any) -> str:
    """``super-import-<org>-<connection>-<root type>:<root id>`` (the seed's unique keys)."""
    root = f"{key_part(p.root_node_type)}:{key_part(p.root_node_id)}"
    return f"super-import-{organization_id}-{p.connection_id}-{root}"


def index_job_id(organization_id: int, p: Any) -> str:
    """The import's id parts plus ``<node type>:<node id>``."""
    root = f"{key_part(p.root_node_type)}:{key_part(p.root_node_id)}"
    node = f"{key_part(p.node_type)}:{key_part(p.node_id)}"
    return f"super-index-{organization_id}-{p.connection_id}-{root}-{node}"


def webhook_job_id(_organization_id: int, p: Any) -> str:
    """``super-webhook-<source>-<delivery id>``: each delivery is its own job."""
    return f"super-webhook-{key_part(p.source)}-{key_part(p.delivery_id)}"


def _source(params: Any) -> str:
    return params.source  # type: ignore[no-any-return]


def import_request(
    organization_id: int,
    source: str,
    connection_id: int,
    root: NodeRef,
    *,
    first_run: bool = False,
) -> JobRequest:
    return JobRequest(
        "super_import",
        organization_id,
        {
            "source": source,
            "connection_id": connection_id,
            "root_node_type": root.node_type,
            "root_node_id": root.node_id,
            "first_run": first_run,
        },
    )


def index_request(
    organization_id: int,
    source: str,
    connection_id: int,
    root: NodeRef,
    node: NodeRef,
    listed_date: datetime | None = None,
    *,
    webhook: bool = False,
) -> JobRequest:
    params: dict[str, Any] = {
        "source": source,
        "connection_id": connection_id,
        "root_node_type": root.node_type,
        "root_node_id": root.node_id,
        "node_type": node.node_type,
        "node_id": node.node_id,
    }
    if listed_date is not None:
        params["listed_date"] = listed_date
    if webhook:
        params["webhook"] = True
    return JobRequest("super_index", organization_id, params)


def families(actors: SuperSourceActors) -> list[Family]:
    """The three families, each bound to its actor body by reference."""
    common: dict[str, Any] = {
        "provider": _source,
        "pause_flag": PAUSE_FLAG,
        "retry": EXTERNAL_SERVICE_RETRY,
        "retention_seconds": RETENTION_SECONDS,
        "run_tiers": RUN_TIERS,
    }
    return [
        Family(
            name="super_import",
            kind="super_import",
            handler=actors.super_import,
            params=ImportParams,
            job_id=import_job_id,
            group_caps=IMPORT_CAPS,
            time_limit_seconds=IMPORT_TIME_LIMIT_SECONDS,
            **common,
        ),
        Family(
            name="super_index",
            kind="super_index",
            handler=actors.super_index,
            params=IndexParams,
            job_id=index_job_id,
            group_caps=INDEX_CAPS,
            **common,
        ),
        Family(
            name="super_webhook",
            kind="super_webhook",
            handler=actors.super_webhook,
            params=WebhookParams,
            job_id=webhook_job_id,
            group_by="global",
            group_caps=WEBHOOK_CAPS,
            # ahead of the index messages a worker has fetched (an import's thousands pass
            # through the workers to be parked at their organization's cap)
            priority=WEBHOOK_PRIORITY,
            **common,
        ),
    ]
