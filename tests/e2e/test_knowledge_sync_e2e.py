"""The seed's end-to-end acceptance: a Notion workspace of 500 pages and a 300-page website
synced for three organizations at once by real worker processes.

Every process builds the production platform with ``bootstrap()`` from environment
variables; the scenario itself (fakes, database, workers, measurements) is
``bench/kb_scenario.py``, which ``python -m bench.kb_sync_e2e`` runs as a benchmark. The
one test-only change in the workers is the crawl politeness rule per host (10/s instead
of production's 1/s), which settings cannot change and which would otherwise make a
300-page crawl take at least 300 s; each organization's site has its own host name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.kb_scenario import ScenarioConfig, run_scenario
from tests.fixtures_db import SERVER_URL

CONFIG = ScenarioConfig(
    organizations=3,
    notion_pages=500,
    site_pages=300,
    max_depth=10,
    max_urls=400,
    windows={
        "kb_source_sync.notion": "4/1",
        "kb_document_sync.notion": "20/1",
        "kb_document_chunks.*": "200/1",
    },
    host_rate="10/1",
    # about 100 s on an idle 2-core machine; the margin is for a busy one
    timeout=240.0,
)


def _brief(result: dict[str, Any]) -> str:
    keys = ("wall_seconds", "documents_per_second", "chunks_written", "jobs_run", "delays")
    keys += ("load_average_1m",)
    lines = [json.dumps({key: result[key] for key in keys})]
    lines += [json.dumps(row) for row in result["window_families"]]
    lines += [json.dumps(result["jobs"]), json.dumps(result["window_sampler"])]
    return "\n".join(lines)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_three_organizations_sync_notion_and_a_website_on_real_workers(
    redis_url: str, tmp_path: Path
) -> None:
    # Given three organizations, each with a Notion source (500 pages, its own data source
    # and token) and a URL source (a 300-page site on its own host), and worker processes
    # for the slow (2) and fast (1) tiers; When the kb-sync tick runs and every job settles
    result = run_scenario(
        CONFIG, redis_url=redis_url, log_dir=tmp_path, server_db_url=SERVER_URL, say=print
    )
    print(_brief(result))
    assert not result["stalled"], f"jobs still live after {CONFIG.timeout:.0f} s"
    assert set(result["worker_exit_codes"].values()) == {0}
    # nothing logged an error either (a held start is not an "unhandled exception")
    assert result["worker_log_errors"] == 0, result["worker_log_error_samples"]
    assert result["tick"] == {"added": 6, "replaced": 0, "deduplicated": 0, "failed": 0}

    # Then every document exists once, with content, and exactly one chunk set of its
    # current content and one search row
    database = result["database"]
    assert database["duplicate_chunk_positions"] == 0
    for organization, found in database["organizations"].items():
        expected = {
            "notion": {"documents": 500, "distinct_identifiers": 500, "with_content": 500,
                       "chunked": 500},
            "url": {"documents": 300, "distinct_identifiers": 300, "with_content": 300,
                    "chunked": 300},
        }  # fmt: skip
        assert {k: found[k] for k in expected} == expected, organization
        assert found["other_documents"] == 0, organization
        assert found["chunk_sets"] == 800, organization
        assert found["documents_with_bad_chunk_set"] == 0, organization
        assert found["chunk_sets_of_unknown_documents"] == 0, organization
        assert found["search_rows"] == 800, organization
        assert found["documents_without_one_search_row"] == 0, organization
        assert found["search_rows_of_unknown_documents"] == 0, organization
        # the crawl completed: every claimed URL finished, 300 pages crawled, and the one
        # link robots.txt disallows finished without content and without a job failure
        (task,) = found["crawl_tasks"]
        assert (task["status"], task["urls_pending"], task["urls_crawled"]) == (
            "completed",
            0,
            300,
        ), organization
        assert found["crawl_ledger"] == {"claimed": 301, "unfinished": 0}, organization
        assert [s["sync_status"] for s in found["sources"]] == ["synced", "synced"]
    assert result["chunks_written"] == sum(
        found["chunks"] for found in database["organizations"].values()
    )
    assert result["documents"] == 2400

    # and no job failed or even retried: throttling delayed jobs, never failed them
    assert result["failed_jobs"] == []
    assert result["retried_jobs"] == []
    for family, jobs in result["jobs"].items():
        assert set(jobs["records"]) == {"completed"}, (family, jobs["records"])
    assert result["jobs"]["kb_document_sync"]["records"]["completed"] == 1500
    assert result["jobs"]["kb_document_chunks"]["records"]["completed"] == 2400
    assert result["jobs"]["kb_crawl_url"]["records"]["completed"] == 903

    # and the windows held: no window of any family counted more than its limit, and no
    # provider window admitted more runs than its limit (each run carries its window)
    windows = result["windows"]
    for window in windows:
        assert window["max_starts_per_window"] <= window["limit"], window
        if "admitted_runs" in window:
            assert window["max_admitted_runs_per_window"] <= window["limit"], window
    notion = [w for w in windows if w["family"] == "kb_document_sync"]
    hosts = [w for w in windows if w["family"] == "crawl-host"]
    (chunks,) = [w for w in windows if w["family"] == "kb_document_chunks"]
    assert len(notion) == 3 and len(hosts) == 3
    assert chunks["admitted_runs"] == 2400
    for window in notion:
        # every Notion page fetch was a run its organization's window admitted
        assert window["admitted_runs"] == window["provider_requests"] == 500, window
    for window in hosts:
        # the crawler's host window counted every page fetch (when the sampler kept up: a
        # count stays readable for one period after its window)
        assert window["provider_requests"] == 300, window
        if result["window_sampler"]["longest_gap_s"] < window["period_seconds"]:
            assert window["starts"] == window["provider_requests"], window
    for window in notion + hosts:
        # The windows were really exercised: some were full.
        assert window["full_windows"] >= 1, window
        # Upstream, over the whole run, the provider never saw more than the window's rate
        # (a partial window at each end allowed). Per second it may see more than the limit:
        # a job admitted late in one window reaches the provider in the next (see the
        # figures printed above), which fixed windows keyed on job starts allow.
        windows_spanned = window["provider_span_seconds"] / window["period_seconds"] + 2
        assert window["provider_requests"] <= window["limit"] * windows_spanned, window
