"""Unit21 sync: the candidate selection SQL, the tick's fan-out to one deterministic job per
source, job-id dedupe, failure isolation, and the kill switch at tick and at run time."""

from __future__ import annotations

import subprocess
import sys

from sqlalchemy.orm import Session

from router.requests import JobRequest
from services.app.bootstrap import Platform
from services.maintenance import store
from services.maintenance.families import PAUSE_UNIT21
from testkit.fakes.rails_server import RailsServer
from testkit.fakes.sentry_server import fake_sentry
from tests import REPO
from tests.integration.services.maintenance.factories import (
    clear_unit21_sources,
    organization,
    organization_data_source,
    running_workers,
)
from tests.platform_harness import wait_until

UNIT21 = "/internal/organization_data_sources/{}/sync_unit21"


def test_the_selection_is_kept_unit21_sources_only(session: Session) -> None:
    org = organization(session)
    kept = organization_data_source(session, org, "unit21")
    discarded = organization_data_source(session, org, "unit21", discarded=True)
    other = organization_data_source(session, org, "zendesk")
    selected = store.unit21_sources(session)
    assert (org, kept) in selected
    assert (org, discarded) not in selected and (org, other) not in selected


def _committed_sources(platform: Platform, count: int) -> list[tuple[int, int]]:
    clear_unit21_sources(platform.sessions)
    with platform.sessions() as session:
        rows = []
        for _ in range(count):
            org = organization(session)
            rows.append((org, organization_data_source(session, org, "unit21")))
        organization_data_source(session, rows[0][0], "unit21", discarded=True)
        session.commit()
    return rows


def test_the_tick_fans_out_one_job_per_source_and_dedupes(platform: Platform) -> None:
    sources = _committed_sources(platform, 3)
    summary = platform.tick("unit21-sync").run("2026-12-01T10:10Z")
    assert summary["added"] == 3
    for _org, ods in sources:
        record = platform.broker.jobs.record(f"unit21-sync-source-{ods}")
        assert record is not None and record["state"] == "waiting"
    again = platform.tick("unit21-sync").run("2026-12-01T10:20Z")
    assert again["deduplicated"] == 3 and again["added"] == 0


def test_one_failing_source_never_stops_the_others(platform: Platform, rails: RailsServer) -> None:
    sources = _committed_sources(platform, 3)
    broken, gone = sources[0][1], sources[1][1]
    rails.reject(UNIT21.format(broken), 422, "Unit21::AuthenticationError", message="bad key")
    rails.missing["unit21"].add(gone)
    platform.tick("unit21-sync").run("2026-12-01T10:30Z")
    jobs = platform.broker.jobs
    with running_workers(platform):
        wait_until(
            lambda: all(
                (jobs.record(f"unit21-sync-source-{ods}") or {}).get("state")
                in ("completed", "failed", "record_missing")
                for _org, ods in sources
            ),
            timeout=30,
        )
    failed = jobs.record(f"unit21-sync-source-{broken}")
    assert failed is not None and failed["state"] == "failed"
    assert "Unit21::AuthenticationError" in failed["last_error"]  # Rails' classification
    assert (jobs.record(f"unit21-sync-source-{gone}") or {})["state"] == "record_missing"
    ok = jobs.record(f"unit21-sync-source-{sources[2][1]}")
    assert ok is not None and ok["state"] == "completed"
    assert '"status": "synced"' in ok["data:sync"]
    (call,) = rails.calls(UNIT21.format(sources[2][1]))
    assert call.headers["authorization"] == "Bearer rails-tkn"


def test_a_raised_switch_skips_queued_jobs_without_calling_rails(
    platform: Platform, rails: RailsServer
) -> None:
    sources = _committed_sources(platform, 1)
    ods = sources[0][1]
    platform.router.enqueue(
        JobRequest("sync_unit21", sources[0][0], {"organization_data_source_id": ods})
    )
    platform.flags.set(PAUSE_UNIT21, True)
    try:
        with running_workers(platform):
            wait_until(
                lambda: (
                    (platform.broker.jobs.record(f"unit21-sync-source-{ods}") or {}).get("state")
                    == "skipped"
                )
            )
    finally:
        platform.flags.set(PAUSE_UNIT21, False)
    assert rails.calls(UNIT21.format(ods)) == []


def test_a_failed_source_reaches_sentry_with_its_organization_data_source_id(
    redis_url: str, database_url: str, namespace: str
) -> None:
    with fake_sentry() as (dsn, inbox):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.integration.services.maintenance.unit21_sentry_probe",
                dsn,
                redis_url,
                database_url,
                namespace,
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        events = inbox.events()
    ods = done.stdout.strip().rsplit("ods=", 1)[1]
    failures = [event for event in events if event.get("exception")]
    assert failures, events
    tags = failures[0].get("tags") or {}
    assert str(tags.get("organization_data_source_id")) == ods
