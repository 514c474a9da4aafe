"""Run by tests/e2e/test_tracing.py in a fresh interpreter (the tracer provider and the
instrumentations are process-wide): tracing on with an in-memory exporter, the real API app
and a real maintenance-tier worker in a thread, Rails' internal endpoints served by the
local fake. Enqueues three ticks through the API with a caller's traceparent (one calls
Rails over HTTP), waits for them and the job one of them enqueues, and prints every finished
span as one JSON line."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared.tracing import configure_tracing
from testkit.fakes.rails_server import RailsServer

TRACEPARENT = sys.argv[1]
TOKEN = sys.argv[2]


def main() -> None:
    rails = RailsServer()
    with rails as rails_url:
        os.environ["RAILS_INTERNAL_URL"] = rails_url
        os.environ["RAILS_INTERNAL_TOKEN"] = rails.token
        run()


def run() -> None:
    exporter = InMemorySpanExporter()
    configure_tracing(None, component="probe", exporter=exporter)
    from services.app.api import create_app
    from services.app.bootstrap import bootstrap
    from tiers.worker import serve

    platform = bootstrap(component="probe")
    client = create_app(platform, warn_open=False).test_client()
    stop = threading.Event()
    worker = threading.Thread(
        target=serve,
        args=(
            platform.brokers.of_tier("maintenance"),
            platform.registry.queues_of_tier("maintenance"),
        ),
        kwargs={"threads": 2, "stop": stop, "poll_ms": 50, "drain_seconds": 5},
        daemon=True,
    )
    worker.start()
    answer = client.post(
        "/internal/jobs/enqueue",
        json={
            "requests": [
                {"kind": "tick:group-slot-reaper", "organization_id": None, "slot": "trace-1"},
                {"kind": "tick:counter-cache-fix", "organization_id": None, "slot": "trace-1"},
                {
                    "kind": "tick:mark-expired-evaluations-failed-hourly",
                    "organization_id": None,
                    "slot": "trace-1",
                },
            ]
        },
        headers={"Authorization": f"Bearer {TOKEN}", "traceparent": TRACEPARENT},
    )
    assert answer.status_code == 202, answer.get_json()
    ids = [
        "group-slot-reaper-tick-trace-1",
        "counter-cache-fix-tick-trace-1",
        "mark-expired-evaluations-failed-hourly-tick-trace-1",
    ]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs = [s for s in exporter.get_finished_spans() if s.name.startswith("run ")]
        if len(runs) >= 4 and all(
            (platform.brokers.record(job_id) or {}).get("state") == "completed" for job_id in ids
        ):
            break
        time.sleep(0.1)
    stop.set()
    worker.join(timeout=15)
    for span in exporter.get_finished_spans():
        context = span.get_span_context()
        print(
            json.dumps(
                {
                    "name": span.name,
                    "kind": span.kind.name,
                    "trace_id": f"{context.trace_id:032x}",
                    "span_id": f"{context.span_id:016x}",
                    "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
                    "links": [f"{link.context.span_id:016x}" for link in span.links],
                    "attributes": {k: str(v) for k, v in (span.attributes or {}).items()},
                    "status": span.status.status_code.name,
                }
            )
        )


if __name__ == "__main__":
    main()
