"""Sentry: warnings with fingerprints, job failures through the Dramatiq integration, a job
failed as worker_died as an error event, and expected outcomes (Delay, RecordMissing) never
reported; nothing at all without a DSN."""

from __future__ import annotations

import json
import subprocess
import sys

from testkit.fakes.sentry_server import fake_sentry
from tests import REPO


def probe(dsn: str, redis_url: str, namespace: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.shared.sentry_probe", dsn, redis_url, namespace],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_with_a_dsn_warnings_and_failures_are_reported_but_expected_outcomes_are_not(
    redis_url: str, namespace: str
) -> None:
    with fake_sentry() as (dsn, inbox):
        output = probe(dsn, redis_url, namespace)
        events = inbox.events()
    assert "started=True" in output
    warnings = [e for e in events if e.get("level") == "warning"]
    assert [w.get("fingerprint") for w in warnings] == [["speedtier", "probe-warning"]]
    errors = [e for e in events if e.get("exception")]
    types = [v["type"] for e in errors for v in e["exception"]["values"]]
    assert "Unrecoverable" in types
    # expected outcomes raise no event, neither as an exception nor as a logged error
    assert not {"Delay", "RecordMissing", "Held"} & set(types)
    messages = json.dumps([e.get("logentry") or e.get("message") for e in events])
    assert "delayed until" not in messages and "not found" not in messages
    # a job failed as worker_died (its runs kept killing their worker) is an error event
    died = [e for e in events if "worker_died" in json.dumps(e.get("logentry") or {})]
    assert [e.get("level") for e in died] == ["error"]


def test_without_a_dsn_nothing_is_sent(redis_url: str, namespace: str) -> None:
    with fake_sentry() as (_dsn, inbox):
        output = probe("", redis_url, namespace)
        events = inbox.events()
    assert "started=False" in output
    assert events == []


def test_without_a_dsn_no_service_module_loads_the_sdk() -> None:
    """Workers without a DSN do not carry the SDK (and its HTTP stack): every product the
    worker assembles reports through ``shared.observability``, which loads it only lazily."""
    code = (
        "import importlib, sys\n"
        "from services.app.bootstrap import SERVICE_MODULES\n"
        "for name in SERVICE_MODULES: importlib.import_module(name)\n"
        "import tiers.worker, tiers.stack\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sentry_sdk'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


def test_report_exception_sends_the_error_with_its_fingerprint_and_tags() -> None:
    import sentry_sdk

    from shared.observability import report_exception, tag_current_scope

    with fake_sentry() as (dsn, inbox), sentry_sdk.isolation_scope() as scope:
        client = sentry_sdk.Client(dsn=dsn, default_integrations=False)
        scope.set_client(client)
        tag_current_scope(organization_id=7)
        try:
            raise ValueError("corrupt media")
        except ValueError as error:
            report_exception(
                error,
                fingerprint=["ConversationUploads", "process", "ValueError"],
                tags={"conversation_upload_id": 42},
            )
        client.flush(timeout=5)
        events = inbox.events()
    assert len(events) == 1
    event = events[0]
    assert event["fingerprint"] == ["ConversationUploads", "process", "ValueError"]
    assert event["exception"]["values"][-1]["type"] == "ValueError"
    assert event["tags"] == {"organization_id": 7, "conversation_upload_id": 42}
