"""The suspect gate: ordinary runs together, a suspect run alone, after the settles."""

from __future__ import annotations

import threading
import time

from tiers.suspects import SuspectGate


def in_thread(target: object) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)  # type: ignore[arg-type]
    thread.start()
    return thread


def test_a_suspect_starts_once_the_ordinary_runs_ended_and_the_settles_are_out() -> None:
    gate = SuspectGate()
    events: list[str] = []
    # Given two ordinary runs in progress
    gate.enter()
    gate.enter()
    # When a suspect arrives
    suspect = in_thread(lambda: gate.enter_alone(lambda: events.append("flushed")))
    time.sleep(0.05)
    # Then it waits for both, and for the settles on their way
    assert events == []
    gate.leave()
    time.sleep(0.05)
    assert events == []
    gate.leave()
    suspect.join(timeout=2)
    assert events == ["flushed"]


def test_no_ordinary_run_starts_while_a_suspect_waits_or_runs() -> None:
    gate = SuspectGate()
    started: list[str] = []
    gate.enter()  # an ordinary run in progress
    suspect = in_thread(lambda: (gate.enter_alone(lambda: None), started.append("suspect")))
    time.sleep(0.05)
    # Given a suspect waiting for the run in progress, a new ordinary run waits behind it
    ordinary = in_thread(lambda: (gate.enter(), started.append("ordinary")))
    time.sleep(0.05)
    assert started == []
    gate.leave()
    suspect.join(timeout=2)
    time.sleep(0.05)
    assert started == ["suspect"]
    # When the suspect ends (its own settle answered first), the ordinary run starts
    gate.leave_alone(lambda: started.append("suspect settled"))
    ordinary.join(timeout=2)
    assert started == ["suspect", "suspect settled", "ordinary"]
