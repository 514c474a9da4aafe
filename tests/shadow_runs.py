"""Shadow runs of each product, recorded by the products' own code paths (the report
collector's comparison, the counter repair's measurement, the upload reading), as the
dashboard's Parity page reads them back through what the products register."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import date

from services.app.bootstrap import Platform
from services.maintenance import shadow as counter_shadow
from services.reports.families import REPORT_JOB_PREFIX, TIER
from services.reports.shadow import shadow_collect
from services.reports.store import ReportRow
from services.uploads.shadow import shadow_process
from shared.observability import current_job


@dataclass(frozen=True)
class RecordedRuns:
    organization_id: int
    report_job_id: str
    counter_job_id: str
    upload_job_id: str
    upload_id: int


def record_shadow_runs(platform: Platform) -> RecordedRuns:
    """A diverged report run (Rails has an agent the native collector does not find), a
    matching counter step, and a diverged upload reading (the upload is gone), each in a job."""
    org = 800_000 + uuid.uuid4().int % 99_999
    jobs = platform.brokers.of_tier(TIER).jobs
    report_job_id = f"{REPORT_JOB_PREFIX}{org}-2026-11-30"
    rails_row = ReportRow(
        agent_id=5,
        agent_name="Ada",
        agent_email="ada@x.test",
        evaluations=2,
        average_score=85.0,
        lowest_score=80.0,
    )
    comparison = shadow_collect(platform.sessions, org, date(2026, 11, 30), None, [rails_row])
    jobs.client.hset(jobs.record_key(report_job_id), "data:shadow", json.dumps(comparison))
    counter_job_id = f"fix-counter-caches-{uuid.uuid4().hex[:6]}"
    token = current_job.set({"job_id": counter_job_id})
    try:
        counter_shadow.record(jobs, counter_shadow.comparison("3", 2, {"fixed": 2}, 0))
    finally:
        current_job.reset(token)
    upload_job_id = f"conversation-upload-process-{uuid.uuid4().hex[:6]}"
    upload_id = 900_000_000 + uuid.uuid4().int % 99_999
    token = current_job.set({"job_id": upload_job_id})
    try:
        shadow_process(platform.sessions, jobs, org, upload_id)
    finally:
        current_job.reset(token)
    return RecordedRuns(org, report_job_id, counter_job_id, upload_job_id, upload_id)
