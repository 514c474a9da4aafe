"""The routine families of seed 001 on the maintenance tier: kinds, job ids, switches.

- ``unit21_sync``: kind ``sync_unit21``, job ``unit21-sync-source-<ods id>``, switch
  ``pause_api2_unit21_sync``.
- ``conversation_summary``: kind ``summarize_conversation``, job ``conversation-summary-<id>``.
- ``counter_cache_fix``: kind ``fix_counter_caches``, job ``counter-cache-fix``, switch
  ``pause_api2_counter_cache_repairs``.

The expired-evaluation sweep is a tick of its own (``ticks.py``), paused by
``pause_api2_expired_evaluation_cleanup``. The seed names no kill switch for summaries: Rails
falls back to its retained ``SummarizeConversationJob`` when the enqueue is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

from router.requests import JobRequest
from shared.inputs import PARAMS_CONFIG, Id
from tiers.families import Family
from tiers.policies import RetryPolicy

if TYPE_CHECKING:
    from services.maintenance.actors import MaintenanceActors

PAUSE_UNIT21 = "pause_api2_unit21_sync"
PAUSE_EXPIRED_EVALUATIONS = "pause_api2_expired_evaluation_cleanup"
PAUSE_COUNTER_CACHES = "pause_api2_counter_cache_repairs"
PAUSE_FLAGS = (PAUSE_UNIT21, PAUSE_EXPIRED_EVALUATIONS, PAUSE_COUNTER_CACHES)

#: BullMQ's "three attempts with exponential backoff" of the seed's maintenance jobs.
MAINTENANCE_RETRY = RetryPolicy(max_attempts=3, base_seconds=30.0)
COUNTER_CACHE_FIX_JOB_ID = "counter-cache-fix"


class _Strict(BaseModel):
    model_config = PARAMS_CONFIG


class Unit21Params(_Strict):
    organization_data_source_id: Id


class SummaryParams(_Strict):
    conversation_id: Id


class CounterCacheParams(_Strict):
    pass


def unit21_request(organization_id: int, organization_data_source_id: int) -> JobRequest:
    return JobRequest(
        "sync_unit21", organization_id, {"organization_data_source_id": organization_data_source_id}
    )


def counter_cache_request() -> JobRequest:
    return JobRequest("fix_counter_caches", None, {})


def families(actors: MaintenanceActors) -> list[Family]:
    """The routine families, each bound to its actor body by reference."""
    return [
        Family(
            name="unit21_sync",
            kind="sync_unit21",
            handler=actors.sync_unit21,
            params=Unit21Params,
            job_id=lambda _org, p: f"unit21-sync-source-{p.organization_data_source_id}",
            fixed_tier="maintenance",
            pause_flag=PAUSE_UNIT21,
            retry=MAINTENANCE_RETRY,
        ),
        Family(
            name="conversation_summary",
            kind="summarize_conversation",
            handler=actors.summarize_conversation,
            params=SummaryParams,
            job_id=lambda _org, p: f"conversation-summary-{p.conversation_id}",
            fixed_tier="maintenance",
            retry=MAINTENANCE_RETRY,
        ),
        Family(
            name="counter_cache_fix",
            kind="fix_counter_caches",
            handler=actors.fix_counter_caches,
            params=CounterCacheParams,
            job_id=lambda _org, _p: COUNTER_CACHE_FIX_JOB_ID,
            fixed_tier="maintenance",
            pause_flag=PAUSE_COUNTER_CACHES,
            retry=MAINTENANCE_RETRY,
            tenant_scoped=False,
            time_limit_seconds=3600.0,
        ),
    ]
