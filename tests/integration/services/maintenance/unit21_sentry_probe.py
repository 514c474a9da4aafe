"""Run in a subprocess by test_unit21.py (Sentry is process-global): one Unit21 source whose
Rails sync fails terminally, through a real worker, with Sentry at the DSN given.
argv: dsn, redis url, database url, namespace."""

from __future__ import annotations

import sys

import sentry_sdk

from router.requests import JobRequest
from services.app.bootstrap import bootstrap
from shared.config import load_settings
from testkit.fakes.rails_server import RailsServer
from tests.integration.services.maintenance.factories import (
    organization,
    organization_data_source,
    running_workers,
)
from tests.platform_harness import wait_until


def main(dsn: str, redis_url: str, database_url: str, namespace: str) -> None:
    rails = RailsServer(token="probe")
    with rails as base_url:
        platform = bootstrap(
            load_settings(
                redis_url=redis_url,
                database_url=database_url,
                redis_namespace=namespace,
                environment="test",
                sentry_dsn=dsn,
                rails_internal_url=base_url,
                rails_internal_token="probe",
            ),
            component="probe",
        )
        with platform.sessions() as session:
            org = organization(session)
            ods = organization_data_source(session, org, "unit21")
            session.commit()
        rails.reject(
            f"/internal/organization_data_sources/{ods}/sync_unit21",
            422,
            "Unit21::AuthenticationError",
        )
        platform.router.enqueue(
            JobRequest("sync_unit21", org, {"organization_data_source_id": ods})
        )
        with running_workers(platform):
            wait_until(
                lambda: (
                    (platform.broker.jobs.record(f"unit21-sync-source-{ods}") or {}).get("state")
                    == "failed"
                ),
                timeout=30,
            )
        sentry_sdk.flush(timeout=5)
        platform.close()
    print(f"ods={ods}")


if __name__ == "__main__":
    main(*sys.argv[1:5])
