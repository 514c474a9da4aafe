"""Retry policies and tier routing as data (no I/O)."""

from __future__ import annotations

import pytest

from tiers.policies import DEFAULT_RETRY, UPLOAD_RETRY, RetryPolicy, WindowRule
from tiers.table import DEFAULT_TIER, queue_name, tier_for_provider


def test_default_policy_is_three_attempts_exponential_from_sixty_seconds() -> None:
    assert DEFAULT_RETRY.max_attempts == 3
    assert [DEFAULT_RETRY.backoff_seconds(n) for n in (1, 2, 3)] == [60.0, 120.0, 240.0]


def test_upload_policy_is_rails_polynomially_longer() -> None:
    assert UPLOAD_RETRY.max_attempts == 5
    # attemptsMade^4 * 1000 + 2000 ms
    assert [UPLOAD_RETRY.backoff_seconds(n) for n in (1, 2, 3, 4)] == [3.0, 18.0, 83.0, 258.0]


def test_backoff_is_capped() -> None:
    policy = RetryPolicy(base_seconds=60, max_backoff_seconds=100)
    assert policy.backoff_seconds(5) == 100


def test_attempts_start_at_one() -> None:
    with pytest.raises(ValueError):
        DEFAULT_RETRY.backoff_seconds(0)


@pytest.mark.parametrize(
    ("provider", "tier"),
    [
        ("linear", "fast"),
        ("GitHub", "fast"),
        ("git", "fast"),
        ("gitlab", "fast"),
        ("notion", "slow"),
        ("google_drive", "slow"),
        ("attio", "slow"),
        ("hubspot", "slow"),
        ("asana", "slow"),
        ("website", "slow"),
        ("brand-new-provider", "slow"),
        (None, "slow"),
    ],
)
def test_providers_map_to_their_tier(provider: str | None, tier: str) -> None:
    assert tier_for_provider(provider) == tier
    assert DEFAULT_TIER == "slow"


def test_queue_names_are_family_dot_tier() -> None:
    assert queue_name("kb_document_sync", "slow") == "kb_document_sync.slow"
    with pytest.raises(ValueError):
        queue_name("kb_document_sync", "warp")


def test_window_rule_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        WindowRule(0, 60)
