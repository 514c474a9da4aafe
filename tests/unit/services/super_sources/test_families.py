"""The super-source families as data: six queues, the seed's caps, run tiers (no I/O)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

import tiers.table
from services.super_sources.actors import SuperSourceActors
from services.super_sources.families import (
    EXTERNAL_SERVICE_RETRY,
    RETENTION_SECONDS,
    ImportParams,
    WebhookParams,
    families,
)
from tiers.families import Family


def _families() -> dict[str, Family]:
    nothing: Any = None  # the families only bind the actors' methods; none runs here
    actors = SuperSourceActors(sessions=nothing, router=nothing, ctx=nothing)
    return {f.name: f for f in families(actors)}


def test_three_families_on_two_tiers_make_six_queues() -> None:
    queues = sorted(q for f in _families().values() for q in f.queues())
    assert queues == sorted(
        f"super_{name}.{tier}"
        for name in ("import", "index", "webhook")
        for tier in ("fast", "slow")
    )


def test_the_seeds_caps_per_organization_and_per_tier() -> None:
    fams = _families()
    assert fams["super_import"].group_key(7, "fast") == ("super_import.fast|7", 1)
    assert fams["super_import"].group_key(7, "slow") == ("super_import.slow|7", 1)
    assert fams["super_index"].group_key(7, "fast") == ("super_index.fast|7", 5)
    assert fams["super_index"].group_key(7, "slow") == ("super_index.slow|7", 2)
    assert fams["super_webhook"].group_key(7, "fast") == ("super_webhook.fast|*", 5)
    assert fams["super_webhook"].group_key(8, "slow") == ("super_webhook.slow|*", 2)


def test_five_attempts_with_growing_waits_and_a_week_of_records() -> None:
    for family in _families().values():
        assert family.retry == EXTERNAL_SERVICE_RETRY
        assert family.retention_seconds == RETENTION_SECONDS == 7 * 86_400
    waits = [EXTERNAL_SERVICE_RETRY.backoff_seconds(n) for n in range(1, 5)]
    assert waits == [15.0, 30.0, 60.0, 120.0] and EXTERNAL_SERVICE_RETRY.max_attempts == 5


class _Provider(BaseModel):
    source: str


def test_a_family_confined_to_run_tiers_sends_other_tiers_to_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(tiers.table.PROVIDER_TIERS, "chores", "maintenance")
    family = Family(
        name="f",
        kind="f",
        handler=lambda **_: None,
        params=_Provider,
        job_id=lambda _org, _p: "x",
        provider=lambda p: p.source,
        run_tiers=("fast", "slow"),
    )
    assert family.tier_of(_Provider(source="github")) == "fast"
    assert family.tier_of(_Provider(source="never-heard-of")) == "slow"
    assert family.tier_of(_Provider(source="chores")) == "slow"  # not one of its tiers
    assert family.queues() == ["f.fast", "f.slow"]
    assert (
        _families()["super_import"].tier_of(
            ImportParams(source="linear", connection_id=1, root_node_type="T", root_node_id="r")
        )
        == "fast"
    )


def test_webhook_messages_run_before_the_index_backlog_a_worker_has_fetched() -> None:
    fams = _families()
    # Dramatiq runs a worker's fetched messages lowest priority first
    assert fams["super_webhook"].priority < fams["super_index"].priority
    assert fams["super_webhook"].priority < fams["super_import"].priority


@pytest.mark.parametrize("received_at", [float("nan"), float("inf"), -1.0])
def test_a_webhook_job_received_at_no_time_is_refused(received_at: float) -> None:
    fields = {"source": "github", "path": "events", "connection_id": 1, "delivery_id": "d"}
    assert WebhookParams(**fields, received_at=1.7e9).received_at == 1.7e9
    with pytest.raises(ValidationError, match="received_at"):
        WebhookParams(**fields, received_at=received_at)
