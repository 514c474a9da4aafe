"""Conversation uploads end to end on real worker processes, small (the scenario of
``python -m bench.uploads``, ``testkit/uploads_scenario.py``, which runs 2,000): 120 direct
XCALLY uploads across 20 organizations processed natively with their XCALLY completions,
Rails' hand-offs lost in transport, responses lost, ``complete_conversation_sync`` answering
500 and corrupt recordings injected; every upload ends completed or failed with its reason,
every ledger row terminal, one recording and one completion each."""

from __future__ import annotations

import pytest

from testkit.uploads_scenario import UploadsConfig, run_uploads


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_uploads_and_completions_end_terminal_exactly_once(redis_url: str) -> None:
    config = UploadsConfig(uploads=120, workers=1, timeout_seconds=300.0)

    result = run_uploads(config, redis_url)

    assert result["problems"] == []
    assert result["uploads"]["completed"] + result["uploads"].get("failed", 0) == 120
    assert result["recordings"] == result["uploads"]["completed"]
    assert result["completions"] == result["uploads"]["completed"]
    assert result["duplicate_completions"] == 0
    assert result["ledger"].get("sync_completion:completed") == result["uploads"]["completed"]
    # the lost hand-offs were repaired only by the reconciler
    assert result["reconciler_replays"] >= 1
