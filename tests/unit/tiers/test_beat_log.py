"""The heartbeat log that lets a run start before start.lua answers (tiers/beat_log.py): it
vouches for a delivery only while heartbeats reached Redis, from its fetch until now, never
more than half the heartbeat timeout apart."""

from __future__ import annotations

import pytest

from tiers import beat_log
from tiers.beat_log import BeatLog


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [100.0]
    monkeypatch.setattr(beat_log.time, "monotonic", lambda: now[0])
    return now


def test_no_heartbeat_vouches_for_nothing(clock: list[float]) -> None:
    assert not BeatLog(10_000).unbroken_since(99.0)


def test_beats_closer_than_half_the_timeout_vouch_from_the_first(clock: list[float]) -> None:
    beats = BeatLog(10_000)  # limit 5 s
    for sent in (90.0, 94.0, 98.0):
        beats.beat(sent)
    assert beats.unbroken_since(90.0)
    assert beats.unbroken_since(97.0)
    # but not for a moment before the first heartbeat that reached Redis
    assert not beats.unbroken_since(89.0)


def test_a_gap_longer_than_half_the_timeout_breaks_the_run(clock: list[float]) -> None:
    beats = BeatLog(10_000)
    beats.beat(80.0)
    beats.beat(90.0)  # 10 s after the last: a peer may have taken this worker for dead
    beats.beat(93.0)
    clock[0] = 94.0
    assert not beats.unbroken_since(85.0)
    assert beats.unbroken_since(90.0)


def test_no_recent_heartbeat_vouches_for_nothing(clock: list[float]) -> None:
    beats = BeatLog(10_000)
    beats.beat(90.0)
    clock[0] = 96.0  # 6 s since the latest heartbeat: the process may have been stopped
    assert not beats.unbroken_since(90.0)


def test_an_answer_arriving_late_does_not_hide_a_gap(clock: list[float]) -> None:
    beats = BeatLog(10_000)
    beats.beat(90.0)
    beats.beat(99.0)  # a gap of 9 s
    beats.beat(92.0)  # a call sent during the gap whose answer came last
    assert not beats.unbroken_since(91.0)
