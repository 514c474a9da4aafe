"""What the knowledge-sync scenario's window report counts from request times and sampled
window counters (``testkit.window_sampler``)."""

from __future__ import annotations

from testkit.window_sampler import WindowSampler, aligned_counts, sliding_max


def test_aligned_counts_count_events_per_fixed_window() -> None:
    assert aligned_counts([0.0, 0.4, 0.999, 1.0, 2.5], 1.0) == {0: 3, 1: 1, 2: 1}
    assert aligned_counts([0.0, 0.25, 0.5], 0.5) == {0: 2, 1: 1}


def test_sliding_max_finds_the_busiest_period_across_window_edges() -> None:
    # At most three in an aligned second, but four in the second from 0.8 to 1.8.
    times = [0.1, 0.8, 0.9, 1.1, 1.2, 2.5]
    assert max(aligned_counts(times, 1.0).values()) == 3
    assert sliding_max(times, 1.0) == 4
    # A period is half open: events exactly one period apart are not in one.
    assert sliding_max([0.0, 1.0, 2.0], 1.0) == 1
    assert sliding_max([], 1.0) == 0


def test_sampler_groups_counters_by_scope_and_survives_its_file() -> None:
    sampler = WindowSampler(None, "ns")
    sampler.highest = {
        "kb_document_sync:notion:ods-1:7": 20,
        "kb_document_sync:notion:ods-1:8": 3,
        "kb_document_sync:notion:ods-1:next": 9,  # a reservation cursor, not a window
        "crawl-host:127.0.0.2:5": 10,
    }
    sampler.polls, sampler.longest_gap = 4, 0.25
    again = WindowSampler.from_json(sampler.as_json())
    assert again.by_scope() == {
        "kb_document_sync:notion:ods-1": {7: 20, 8: 3},
        "crawl-host:127.0.0.2": {5: 10},
    }
    assert (again.polls, again.longest_gap) == (4, 0.25)
