"""The operator's pages through Flask's test client on real Redis and PostgreSQL: security
headers, sign-out and the sign-in limit, the signed banner, the Failed page's filters and
bulk actions, cancel, honest predictions, the per-organization page and the CLI's audit.
(tests/e2e/test_dashboard_browser.py drives the same pages in Chromium.)"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from router.requests import JobRequest
from services.app.bootstrap import SERVICE_MODULES, Platform
from services.app.cli import main
from services.app.dashboard import auth
from services.app.dashboard.web import SECURITY_HEADERS
from services.reports.families import PAUSE_FLAG as REPORTS_FLAG
from shared.config import parse_rate
from shared.db.engine import session_scope
from shared.db.models.operator import OperatorAction
from tests import platform_harness as h
from tests.fixtures_platform import TOKEN, MakePlatform

HARNESS = (*SERVICE_MODULES, "tests.platform_harness")
FLAG = "pause_api2_test_family"


@pytest.fixture
def platform(make_platform: MakePlatform) -> Iterator[Platform]:
    platform = make_platform(services=HARNESS, cancel_grace_seconds=2.0)
    yield platform
    platform.flags.set(FLAG, False)  # Flipper's tables outlive the test (committed)
    platform.flags.set(REPORTS_FLAG, False)


def signed_in(app: Flask, name: str) -> FlaskClient:
    client = app.test_client()
    answer = client.post("/dashboard/login", data={"name": name, "token": TOKEN})
    assert answer.status_code == 302
    return client


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([0-9a-f]+)"', html)
    assert match, "no CSRF token on the page"
    return match.group(1)


def enqueue(
    platform: Platform, item: str, org: int, kind: str = "t_plain", **params: object
) -> str:
    request = JobRequest(kind=kind, organization_id=org, params={"item": item, **params})
    return platform.router.enqueue_many([request])[0].job_id


def actions_of(platform: Platform, operator: str) -> list[OperatorAction]:
    with session_scope(platform.sessions) as session:
        rows = session.scalars(
            select(OperatorAction)
            .where(OperatorAction.operator == operator)
            .order_by(OperatorAction.id)
        ).all()
        session.expunge_all()
        return list(rows)


def test_every_dashboard_response_carries_the_security_headers(app: Flask) -> None:
    anonymous = app.test_client()
    client = signed_in(app, "hdr")
    answers = [
        anonymous.get("/dashboard/login"),
        anonymous.get("/dashboard/failed"),  # a redirect to the sign-in form
        anonymous.post("/dashboard/jobs/x/retry"),  # 401
        client.get("/dashboard/"),
        client.get("/dashboard/failed"),
        client.get("/dashboard/busy"),
        client.get("/dashboard/orgs/7"),
        client.get("/dashboard/no/such/page"),
        client.get("/dashboard/static/dashboard.css"),
        client.post("/dashboard/jobs/x/retry"),  # 403: no CSRF token
    ]
    for answer in answers:
        for name, value in SECURITY_HEADERS.items():
            assert answer.headers.get(name) == value, (answer.request.path, name)
    assert "frame-ancestors 'none'" in SECURITY_HEADERS["Content-Security-Policy"]


def test_sign_out_revokes_the_session_on_the_server(app: Flask) -> None:
    client = signed_in(app, "leaver")
    cookie = client.get_cookie(auth.COOKIE, path="/dashboard")
    assert cookie is not None
    stolen = cookie.value
    token = csrf_of(client.get("/dashboard/").text)
    assert client.post("/dashboard/logout", data={"csrf_token": token}).status_code == 302
    # A copy of the cookie kept from before the sign-out is refused
    thief = app.test_client()
    thief.set_cookie(auth.COOKIE, stolen, path="/dashboard")
    answer = thief.get("/dashboard/")
    assert answer.status_code == 302 and "/dashboard/login" in answer.headers["Location"]


def test_failed_sign_ins_are_limited(app: Flask, platform: Platform) -> None:
    client = app.test_client()
    limit, window = parse_rate(platform.settings.auth_failure_rate)
    for _ in range(limit):
        wrong = client.post("/dashboard/login", data={"name": "m", "token": "guess"})
        assert wrong.status_code == 401
    # Even the right token is refused until the window ends
    blocked = client.post("/dashboard/login", data={"name": "m", "token": TOKEN})
    assert blocked.status_code == 429 and b"Too many failed sign-ins" in blocked.data
    assert 0 < int(blocked.headers["Retry-After"]) <= window


def test_the_banner_shows_only_what_the_server_wrote(app: Flask, platform: Platform) -> None:
    client = signed_in(app, "ann")
    forged = client.get("/dashboard/failed?done=Session+expired,+sign+in+at+evil.example").text
    assert "evil.example" not in forged and 'id="done"' not in forged
    job_id = enqueue(platform, "b1", 7)
    page = client.get(f"/dashboard/jobs/{job_id}").text
    answer = client.post(f"/dashboard/jobs/{job_id}/cancel", data={"csrf_token": csrf_of(page)})
    assert answer.status_code == 302
    shown = client.get(answer.headers["Location"]).text
    assert re.search(r'id="done">cancel: requested<', shown)
    tampered = answer.headers["Location"].replace("requested", "completed")
    assert 'id="done"' not in client.get(tampered).text


def test_failed_jobs_by_tenant_and_cause_and_a_bulk_retry(app: Flask, platform: Platform) -> None:
    # Given 3 unrecoverable failures of organization 7 and 2 of organization 8, and one
    # retryable failure of organization 8 (its attempts spent)
    for i in range(3):
        enqueue(platform, f"u7-{i}", 7, mode="unrecoverable")
    for i in range(2):
        enqueue(platform, f"u8-{i}", 8, mode="unrecoverable")
    flaky = enqueue(platform, "r8", 8, mode="retryable")
    with h.running_worker(platform.broker):
        h.wait_until(lambda: h.state(platform.broker, flaky) == "failed", timeout=20)
        h.wait_until(lambda: _failed_count(platform) == 6, timeout=20)
    client = signed_in(app, "bulk-bob")
    # The page shows the organization and error class, grouped with counts
    everything = client.get("/dashboard/failed").text
    assert re.search(
        r'data-error="Unrecoverable"><td><a [^>]+>Unrecoverable</a></td><td>5<', everything
    )
    assert re.search(r'data-error="Retryable"><td><a [^>]+>Retryable</a></td><td>1<', everything)
    mine = client.get("/dashboard/failed?org=7&error=Unrecoverable&since=24").text
    assert mine.count('data-org="7"') == 3 and 'data-org="8"' not in mine
    assert "3 failed job(s) match; 3 can be retried or discarded." in mine
    token = csrf_of(mine)
    form = {"csrf_token": token, "action": "retry", "org": "7", "error": "Unrecoverable"}
    # A confirmation that stated another count does nothing
    stale = client.post("/dashboard/failed/bulk", data={**form, "expected": "2"})
    assert stale.status_code == 409 and _failed_count(platform) == 6
    # When Bob retries the filtered set, as confirmed
    done = client.post("/dashboard/failed/bulk", data={**form, "expected": "3"})
    assert done.status_code == 302
    assert "retried 3 of 3 failed job(s)" in client.get(done.headers["Location"]).text
    # Then organization 7's jobs are back in their queue, organization 8's still failed
    assert _failed_count(platform) == 3
    assert h.state(platform.broker, "plain-u7-0") == "waiting"
    [row] = actions_of(platform, "bulk-bob")
    assert (row.action, row.target, row.outcome) == (
        "bulk-retry",
        "error=Unrecoverable org=7",
        "3 done",
    )
    # Pages: 60 per page would not fit one; 3 left fit one page
    assert "page 1 of 1" in client.get("/dashboard/failed").text


def _failed_count(platform: Platform) -> int:
    from services.app.dashboard.failures import all_failures

    return sum(1 for f in all_failures(platform) if f.actionable)


def test_cancel_a_running_job_from_the_busy_page(app: Flask, platform: Platform) -> None:
    job_id = enqueue(platform, "long", 7, kind="t_serial", mode="steps", times=400)
    behind = enqueue(platform, "behind", 7, kind="t_serial")
    client = signed_in(app, "cancel-cid")
    with h.running_worker(platform.broker, threads=2):
        h.wait_until(lambda: job_id in client.get("/dashboard/busy").text, timeout=10)
        busy = client.get("/dashboard/busy").text
        row = re.search(rf'<tr data-job="{job_id}">.*?</tr>', busy, re.S)
        assert row is not None and " pid " in row.group(0)
        job_page = client.get(f"/dashboard/jobs/{job_id}").text
        assert re.search(
            r'running for <span id="running-for">\d+ s</span> on <span id="worker">[^<]+ pid \d+<',
            job_page,
        )
        holders = client.get("/dashboard/busy?group=t_serial.fast|7").text
        assert f'data-job="{job_id}"' in holders
        answer = client.post(f"/dashboard/jobs/{job_id}/cancel", data={"csrf_token": csrf_of(busy)})
        assert answer.status_code == 302
        h.wait_until(lambda: h.state(platform.broker, job_id) == "cancelled", timeout=5)
        h.wait_until(lambda: h.state(platform.broker, behind) == "completed", timeout=10)
    again = client.post(f"/dashboard/jobs/{job_id}/cancel", data={"csrf_token": csrf_of(busy)})
    assert again.status_code == 409 and b"not queued or running" in again.data
    assert [(r.action, r.outcome) for r in actions_of(platform, "cancel-cid")] == [
        ("cancel", "requested"),
        ("cancel", "not_live"),
    ]


def test_predictions_say_what_holds_a_queue_back(app: Flask, platform: Platform) -> None:
    for item in ("p1", "p2", "p3"):
        enqueue(platform, item, 7, kind="t_serial")
    enqueue(platform, "paused-1", 7, kind="t_paused")
    client = signed_in(app, "pia")
    token = csrf_of(client.get(f"/dashboard/switches/{FLAG}?to=on").text)
    client.post(
        f"/dashboard/switches/{FLAG}", data={"to": "on", "confirm": FLAG, "csrf_token": token}
    )
    queues = client.get("/dashboard/partials/queues").text
    paused = re.search(r'data-queue="t_paused.fast".*?</tr>', queues, re.S)
    assert paused is not None
    assert re.search(
        rf"paused by {FLAG} since \d{{4}}-\d\d-\d\d [\d:]+ UTC by pia", paused.group(0)
    )
    assert "no worker serves this tier" in paused.group(0)
    orgs = client.get("/dashboard/orgs").text
    assert "no worker serves this tier" in orgs and " in " not in _eta(orgs, "t_serial.fast|7")
    # With a worker alive for the tier, a time is predicted again
    with h.running_worker(platform.broker, threads=1):
        h.wait_until(lambda: "no worker" not in client.get("/dashboard/partials/queues").text)


def _eta(html: str, group: str) -> str:
    row = re.search(rf'data-group="{re.escape(group)}".*?<td class="eta">(.*?)</td>', html, re.S)
    assert row is not None
    return row.group(1)


def test_the_organization_page(app: Flask, platform: Platform) -> None:
    for item in ("o1", "o2", "o3"):
        enqueue(platform, item, 42, kind="t_serial")
    enqueue(platform, "o-late", 42, mode="delay_long")
    enqueue(platform, "o-bad", 42, mode="unrecoverable")
    with h.running_worker(platform.broker, threads=1):
        h.wait_until(lambda: h.state(platform.broker, "plain-o-bad") == "failed")
        h.wait_until(lambda: h.state(platform.broker, "plain-o-late") == "delayed")
    client = signed_in(app, "ola")
    page = client.get("/dashboard/orgs/42").text
    assert "Organization 42" in page
    assert 'id="delayed"' in page and "plain-o-late" in page
    assert 'id="failed"' in page and "plain-o-bad" in page
    assert client.get("/dashboard/orgs/forty-two").status_code == 400


def test_cli_actions_are_audited_with_the_os_user(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = platform.settings
    monkeypatch.setenv("REDIS_URL", settings.redis_url or "")
    monkeypatch.setenv("DATABASE_URL", settings.database_url or "")
    monkeypatch.setenv("SPEEDTIER_REDIS_NAMESPACE", settings.redis_namespace)
    monkeypatch.setenv("SPEEDTIER_ENV", "test")
    monkeypatch.setenv("USER", "oncall-olga")
    monkeypatch.setenv("LOGNAME", "oncall-olga")
    runner = CliRunner()
    assert runner.invoke(main, ["pause", REPORTS_FLAG]).exit_code == 0
    assert runner.invoke(main, ["resume", REPORTS_FLAG]).exit_code == 0
    refused = runner.invoke(main, ["jobs", "cancel", "no-such-job"])
    assert refused.exit_code == 1 and "no_job" in refused.output
    rows = actions_of(platform, "cli:oncall-olga")
    assert [(r.action, r.target, r.outcome) for r in rows] == [
        ("pause", REPORTS_FLAG, "paused"),
        ("resume", REPORTS_FLAG, "resumed"),
        ("cancel", "no-such-job", "no_job"),
    ]
