"""Traces end to end, in a fresh process with tracing on and an in-memory exporter: a
caller's traceparent is continued by the API's server span, each enqueue is a producer span
under it whose context rides in the job's message, the worker's run is a consumer span child
of and linked to its enqueue, a job enqueued by a running tick continues the same trace, and
the run's Redis commands, SQL statements and provider HTTP calls are its children. Off (no
endpoint), nothing is installed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest
import requests

from testkit.fakes.otlp_receiver import otlp_receiver
from testkit.ports import free_port
from tests import REPO
from tests.fresh_process import printed_by
from tests.platform_harness import wait_until

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"
TOKEN = "trace-token"

Span = dict[str, Any]


def spans(redis_url: str, database_url: str, namespace: str) -> list[Span]:
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_ENV": "test",
        "INTERNAL_API_TOKEN": TOKEN,
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.e2e.tracing_probe", TRACEPARENT, TOKEN],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def one(found: list[Span], **match: Any) -> Span:
    hits = [s for s in found if all(s.get(k) == v for k, v in match.items())]
    assert len(hits) == 1, (match, [s["name"] for s in found])
    return hits[0]


def children(found: list[Span], parent: Span) -> list[Span]:
    return [s for s in found if s["parent_id"] == parent["span_id"]]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_job_is_followed_from_the_callers_request_to_its_sql(
    redis_url: str, database_url: str, namespace: str
) -> None:
    found = spans(redis_url, database_url, namespace)
    # The API continued the caller's trace: its server span's parent is the caller's span
    server = one(found, kind="SERVER")
    assert server["trace_id"] == TRACE_ID and server["parent_id"] == CALLER_SPAN
    # Each enqueue is a producer span under it
    produced = {s["name"]: s for s in children(found, server) if s["kind"] == "PRODUCER"}
    assert set(produced) == {
        "enqueue group_slot_reaper_tick",
        "enqueue counter_cache_fix_tick",
        "enqueue mark_expired_evaluations_failed_hourly_tick",
    }
    # Each run is a consumer span, child of its enqueue and linked to it, in the same trace
    for family in (
        "group_slot_reaper_tick",
        "counter_cache_fix_tick",
        "mark_expired_evaluations_failed_hourly_tick",
    ):
        run = one(found, name=f"run {family}")
        enqueue = produced[f"enqueue {family}"]
        assert run["kind"] == "CONSUMER" and run["trace_id"] == TRACE_ID
        assert run["parent_id"] == enqueue["span_id"]
        assert run["links"] == [enqueue["span_id"]]
        tick = family.removesuffix("_tick").replace("_", "-")
        assert run["attributes"]["speedtier.job_id"] == f"{tick}-tick-trace-1"
    # The reaper's Redis commands are children of its run
    reaper = one(found, name="run group_slot_reaper_tick")
    assert [s for s in children(found, reaper) if s["kind"] == "CLIENT"], "no Redis spans"
    # The tick's own enqueue continues the trace to the job it enqueued, and that job's SQL
    tick_run = one(found, name="run counter_cache_fix_tick")
    (nested,) = [s for s in children(found, tick_run) if s["kind"] == "PRODUCER"]
    fix = one(found, name="run counter_cache_fix")
    assert fix["trace_id"] == TRACE_ID and fix["parent_id"] == nested["span_id"]
    sql = [s for s in children(found, fix) if "db.statement" in s["attributes"]]
    assert sql, [s["name"] for s in children(found, fix)]
    # A provider HTTP call (Rails' internal endpoint) is a child of its run
    expired = one(found, name="run mark_expired_evaluations_failed_hourly_tick")
    (call,) = [s for s in children(found, expired) if s["name"] == "POST"]
    assert call["kind"] == "CLIENT" and call["status"] != "ERROR"
    assert "/internal/expired_evaluations/process" in json.dumps(call["attributes"])
    # Spans without a parent of ours are dropped: every span belongs to the caller's trace
    assert {s["trace_id"] for s in found} == {TRACE_ID}


def test_without_an_endpoint_nothing_is_loaded_or_installed() -> None:
    script = (
        "import sys\n"
        "from shared.tracing import configure_tracing, is_on\n"
        "print(configure_tracing(None, component='x'), is_on())\n"
        "print(any(m.startswith('opentelemetry.sdk') for m in sys.modules))\n"
    )
    assert printed_by(script) == ["False", "False", "False"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_api_process_exports_over_otlp_http(
    redis_url: str, database_url: str, namespace: str
) -> None:
    """The real ``speedtier api`` with OTEL_EXPORTER_OTLP_ENDPOINT set posts its spans to a
    local OTLP/HTTP receiver: the request's server span in the caller's trace, and the
    enqueue's producer span under it."""
    with otlp_receiver() as (endpoint, inbox):
        port = free_port()
        env = {
            **os.environ,
            "REDIS_URL": redis_url,
            "DATABASE_URL": database_url,
            "SPEEDTIER_REDIS_NAMESPACE": namespace,
            "SPEEDTIER_ENV": "test",
            "INTERNAL_API_TOKEN": TOKEN,
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        command = [
            sys.executable, "-m", "services.app.cli", "api",
            "--host", "127.0.0.1", "--port", str(port), "--workers", "1", "--threads", "2",
        ]  # fmt: skip
        api = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_until(lambda: answers(f"{url}/healthz"), timeout=30)
            answer = requests.post(
                f"{url}/internal/jobs/enqueue",
                json={
                    "requests": [
                        {"kind": "tick:group-slot-reaper", "organization_id": None, "slot": "o-1"}
                    ]
                },
                headers={"Authorization": f"Bearer {TOKEN}", "traceparent": TRACEPARENT},
                timeout=10,
            )
            assert answer.status_code == 202, answer.text
            wait_until(lambda: any(s.kind == SERVER for s in inbox.received()), timeout=20)
        finally:
            api.send_signal(signal.SIGTERM)
            api.communicate(timeout=40)
        received = [s for s in inbox.received() if s.trace_id == TRACE_ID]
    (server,) = [s for s in received if s.kind == SERVER]
    assert server.parent_span_id == CALLER_SPAN
    assert (server.service, server.component) == ("speedtier", "api")
    (enqueue,) = [s for s in received if s.kind == PRODUCER]
    assert enqueue.name == "enqueue group_slot_reaper_tick"
    assert enqueue.parent_span_id == server.span_id


SERVER, PRODUCER = 2, 4  # opentelemetry.proto.trace.v1.Span.SpanKind


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=5).status_code == 200
    except requests.RequestException:  # not listening yet, or too slow to answer under load
        return False
