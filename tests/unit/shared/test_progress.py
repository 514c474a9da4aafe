"""Progress goes to a terminal only: a bar with the count when forced, nothing on a pipe."""

from __future__ import annotations

import io

import pytest

from shared import progress


def test_nothing_is_written_when_the_stream_is_not_a_terminal() -> None:
    stream = io.StringIO()
    assert list(progress.track(range(5), "items", stream=stream)) == [0, 1, 2, 3, 4]
    with progress.steps("poll", None, stream=stream) as step:
        step()
    with progress.working("query", stream=stream):
        pass
    assert stream.getvalue() == ""


def test_a_terminal_sees_the_description_and_the_count() -> None:
    stream = io.StringIO()
    seen = []
    for item in progress.track(["a", "b", "c"], "re-driving", stream=stream, force=True):
        seen.append(item)
    assert seen == ["a", "b", "c"]
    text = stream.getvalue()
    assert "re-driving" in text
    assert "3/3" in text


def test_steps_advance_by_hand_and_rename_the_task() -> None:
    stream = io.StringIO()
    with progress.steps("benchmarks", 2, stream=stream, force=True) as step:
        step(0, description="benchmark throughput")
        step()
        step()
    text = stream.getvalue()
    assert "benchmark throughput" in text and "2/2" in text


def test_an_error_inside_still_propagates() -> None:
    with pytest.raises(ValueError), progress.working("failing", force=False):
        raise ValueError("boom")
