"""The tier table's worker defaults."""

from __future__ import annotations

from tiers.table import TIERS


def test_a_slow_tier_worker_fetches_no_more_than_its_threads_can_start() -> None:
    assert TIERS["slow"].prefetch(4) == 4


def test_other_tiers_fetch_twice_their_threads_as_dramatiq_does() -> None:
    assert TIERS["fast"].prefetch(8) == 16
    assert TIERS["maintenance"].prefetch(2) == 4


def test_a_configured_prefetch_wins_in_every_tier() -> None:
    assert {tier.prefetch(4, configured=10) for tier in TIERS.values()} == {10}
