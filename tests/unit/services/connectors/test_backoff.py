"""The backoff after repeated rate limits: exponential, jittered, never under the provider's
minimum nor over the configured bound."""

from __future__ import annotations

import pytest

from services.connectors.nodes import backoff_seconds


@pytest.mark.parametrize("rand", [0.0, 0.5, 1.0])
def test_each_wait_lies_in_its_band(rand: float) -> None:
    waits = [backoff_seconds(n, 60.0, 900.0, lambda: rand) for n in range(1, 8)]

    assert waits[0] == 60.0
    bands = [(60, 120), (120, 240), (240, 480), (450, 900), (450, 900), (450, 900)]
    assert all(low <= w <= high for w, (low, high) in zip(waits[1:], bands, strict=True))


def test_the_jitter_spreads_the_waits() -> None:
    assert backoff_seconds(3, 60.0, 900.0, lambda: 0.0) == 120.0
    assert backoff_seconds(3, 60.0, 900.0, lambda: 1.0) == 240.0


def test_a_bound_under_the_base_wins() -> None:
    assert backoff_seconds(1, 60.0, 10.0) == 10.0
    assert backoff_seconds(40, 60.0, 10.0) == 10.0
