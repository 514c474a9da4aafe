"""Sentry: warnings with fingerprints, job failures through the Dramatiq integration, and
expected outcomes (Delay, RecordMissing) never reported; nothing at all without a DSN."""

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


def test_without_a_dsn_nothing_is_sent(redis_url: str, namespace: str) -> None:
    with fake_sentry() as (_dsn, inbox):
        output = probe("", redis_url, namespace)
        events = inbox.events()
    assert "started=False" in output
    assert events == []
