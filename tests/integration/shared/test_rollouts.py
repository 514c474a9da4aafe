"""PostHog rollout flags through the official ``posthog`` SDK, polling the local PostHog
server's flag definitions: per region, per organization, and closed (off) whenever PostHog
cannot be read."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.flags import Flags
from shared.rollouts import COUNTER_CACHE_NATIVE_REPAIRS, ROLLOUT_FLAGS, PostHogRollouts
from testkit.fakes.posthog_server import PostHogServer, organization_flag, region_flag

REPORT_COLLECT = "api2_daily_agent_evaluation_report_collect"


@pytest.fixture
def posthog() -> Iterator[PostHogServer]:
    server = PostHogServer()
    with server:
        yield server


def rollouts_for(server: PostHogServer, **overrides: object) -> PostHogRollouts:
    options: dict[str, object] = {
        "project_api_key": server.project_api_key,
        "personal_api_key": server.personal_api_key,
        "host": server.base_url,
        "poll_seconds": 60,
        "region": "eu-central-1",
        **overrides,
    }
    return PostHogRollouts(**options)  # type: ignore[arg-type]


def test_a_region_release_condition_is_on_in_that_region_only(posthog: PostHogServer) -> None:
    posthog.set_flags(region_flag(COUNTER_CACHE_NATIVE_REPAIRS, ["eu-central-1"]))
    rollouts = rollouts_for(posthog)
    try:
        assert rollouts.is_enabled(COUNTER_CACHE_NATIVE_REPAIRS, organization_id=1)
        assert rollouts.is_enabled(
            COUNTER_CACHE_NATIVE_REPAIRS, organization_id=1, region="eu-central-1"
        )
        assert not rollouts.is_enabled(
            COUNTER_CACHE_NATIVE_REPAIRS, organization_id=1, region="us-east-1"
        )
        assert not rollouts.is_enabled(REPORT_COLLECT, organization_id=1)  # unknown flag
        assert posthog.polls() >= 1
        # the poll carried the project token and the personal key
        (first, *_) = [r for r in posthog.requests if r.path.startswith("/flags/definitions")]
        assert first.param("token") == posthog.project_api_key
    finally:
        rollouts.close()


def test_an_organization_release_condition_is_per_organization(posthog: PostHogServer) -> None:
    posthog.set_flags(organization_flag(REPORT_COLLECT, [7, 9]))
    rollouts = rollouts_for(posthog)
    try:
        assert rollouts.is_enabled(REPORT_COLLECT, organization_id=7)
        assert rollouts.is_enabled(REPORT_COLLECT, organization_id=9)
        assert not rollouts.is_enabled(REPORT_COLLECT, organization_id=8)
    finally:
        rollouts.close()


def test_a_reload_sees_the_second_region_added(posthog: PostHogServer) -> None:
    posthog.set_flags(region_flag(COUNTER_CACHE_NATIVE_REPAIRS, ["eu-central-1"]))
    rollouts = rollouts_for(posthog)
    try:
        assert not rollouts.is_enabled(
            COUNTER_CACHE_NATIVE_REPAIRS, organization_id=1, region="us-east-1"
        )
        posthog.set_flags(region_flag(COUNTER_CACHE_NATIVE_REPAIRS, ["eu-central-1", "us-east-1"]))
        rollouts.reload()
        assert rollouts.is_enabled(
            COUNTER_CACHE_NATIVE_REPAIRS, organization_id=1, region="us-east-1"
        )
    finally:
        rollouts.close()


@pytest.mark.parametrize("failure", ["500", "truncated", "401"])
def test_unreadable_posthog_means_off(posthog: PostHogServer, failure: str) -> None:
    posthog.set_flags(region_flag(COUNTER_CACHE_NATIVE_REPAIRS, ["eu-central-1"]))
    if failure == "401":
        rollouts = rollouts_for(posthog, personal_api_key="phx_wrong")
    else:
        for path in ("/flags/definitions", "/api/feature_flag/local_evaluation/"):
            posthog.fail(path, failure, times=10, delay=5.0)
        rollouts = rollouts_for(posthog)
    try:
        assert not rollouts.is_enabled(COUNTER_CACHE_NATIVE_REPAIRS, organization_id=1)
    finally:
        rollouts.close()


def test_nothing_listening_means_off() -> None:
    rollouts = PostHogRollouts(
        project_api_key="phc", personal_api_key="phx", host="http://127.0.0.1:1", region="x"
    )
    try:
        assert not rollouts.is_enabled(COUNTER_CACHE_NATIVE_REPAIRS, organization_id=1)
    finally:
        rollouts.close()


def test_flags_rollout_is_off_without_posthog_and_overrides_win() -> None:
    flags = Flags(engine=None, overrides={REPORT_COLLECT: True})  # type: ignore[arg-type]
    assert flags.rollout(REPORT_COLLECT, organization_id=1)
    assert not flags.rollout(COUNTER_CACHE_NATIVE_REPAIRS, organization_id=1)
    assert len(set(ROLLOUT_FLAGS)) == 8


def test_an_outage_after_loading_turns_flags_off_then_recovery_on(posthog: PostHogServer) -> None:
    posthog.set_flags(region_flag(COUNTER_CACHE_NATIVE_REPAIRS, ["eu-central-1"]))
    rollouts = rollouts_for(posthog)
    try:
        assert rollouts.is_enabled(COUNTER_CACHE_NATIVE_REPAIRS, organization_id=1)
        posthog.fail("/flags/definitions", "500", times=2)
        rollouts.reload()  # one failed poll: a blip, the last definitions hold
        assert rollouts.is_enabled(COUNTER_CACHE_NATIVE_REPAIRS, organization_id=1)
        rollouts.reload()  # two in a row: unreachable, fail closed
        assert not rollouts.is_enabled(COUNTER_CACHE_NATIVE_REPAIRS, organization_id=1)
        rollouts.reload()  # answering again
        assert rollouts.is_enabled(COUNTER_CACHE_NATIVE_REPAIRS, organization_id=1)
    finally:
        rollouts.close()
