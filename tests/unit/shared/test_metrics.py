"""shared.metrics: declared once per name, and in multiprocess mode each process's values
land in the shared directory (created when missing) and are summed at scrape time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from shared import metrics
from tests import REPO

CHILD = """
from shared import metrics
done = metrics.counter("test_child_runs", "runs", ["kind"])
done.labels("a").inc({n})
"""


def test_a_name_is_declared_once() -> None:
    first = metrics.counter("test_declared_once", "x", ["a"])
    assert metrics.counter("test_declared_once", "x", ["a"]) is first
    with pytest.raises(ValueError):
        metrics.counter("test_declared_once", "x", ["b"])
    with pytest.raises(ValueError):
        metrics.histogram("test_declared_once", "x", ["a"])


def test_processes_sum_into_one_scrape_through_a_directory_created_on_demand(
    tmp_path: Path,
) -> None:
    # Given PROMETHEUS_MULTIPROC_DIR naming a directory that does not exist yet
    shared_dir = tmp_path / "fresh" / "metrics"
    env = {**os.environ, metrics.ENV: str(shared_dir)}
    # When two processes count 2 and 3 runs
    for n in (2, 3):
        subprocess.run(
            [sys.executable, "-c", CHILD.format(n=n)], env=env, cwd=REPO, check=True, timeout=60
        )
    # Then a scrape over the directory (as the API's /metrics or a pool's port does) sums them
    scrape = subprocess.run(
        [sys.executable, "-c", "from shared import metrics; print(metrics.render()[0].decode())"],
        env=env,
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(scrape)
        for s in family.samples
    }
    assert values[("speedtier_test_child_runs_total", (("kind", "a"),))] == 5
    assert shared_dir.is_dir()
