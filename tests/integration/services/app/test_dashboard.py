"""The dashboard's routes on real Redis and PostgreSQL through Flask's test client: sign-in,
CSRF, clear answers to bad input, and each page drawn from the live platform. (The browser
test, tests/e2e/test_dashboard_browser.py, drives the same pages in Chromium.)"""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, text

from router.requests import JobRequest
from services.app.api import create_app
from services.app.bootstrap import SERVICE_MODULES, Platform
from services.app.dashboard import auth
from services.app.dashboard.prediction import Rates, predict
from services.app.dashboard.snapshot import Group
from services.app.scheduler import TickScheduler
from services.rails import delivery_claims
from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.db.models import ConversationUpload, ConversationUploadDelivery, Organization
from shared.db.models.operator import OperatorAction
from shared.parity import ParityRun
from tests import platform_harness as h
from tests.fixtures_platform import AUTH, TOKEN, MakePlatform
from tests.shadow_runs import record_shadow_runs

HARNESS = (*SERVICE_MODULES, "tests.platform_harness")


FLAG = "pause_api2_test_family"


@pytest.fixture
def platform(make_platform: MakePlatform) -> Iterator[Platform]:
    platform = make_platform(services=HARNESS)
    yield platform
    platform.flags.set(FLAG, False)  # Flipper's tables outlive the test (committed)


def signed_in(app: Flask, name: str = "ann") -> FlaskClient:
    client = app.test_client()
    answer = client.post(
        "/dashboard/login", data={"name": name, "token": TOKEN, "next": "/dashboard/"}
    )
    assert answer.status_code == 302 and answer.headers["Location"] == "/dashboard/"
    return client


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([0-9a-f]+)"', html)
    assert match, "no CSRF token on the page"
    return match.group(1)


def enqueue(platform: Platform, item: str, kind: str = "t_plain", **params: object) -> str:
    request = JobRequest(kind=kind, organization_id=7, params={"item": item, **params})
    return platform.router.enqueue_many([request])[0].job_id


def test_pages_need_a_signed_in_operator(client: FlaskClient) -> None:
    answer = client.get("/dashboard/orgs")
    assert answer.status_code == 302
    assert answer.headers["Location"].startswith("/dashboard/login?next=/dashboard/orgs")
    assert client.post("/dashboard/jobs/x/retry").status_code == 401
    wrong = client.post("/dashboard/login", data={"name": "ann", "token": "nope"})
    assert wrong.status_code == 401 and b"not this deployment" in wrong.data
    forged = f"ann|{int(time.time())}|{'0' * 64}"
    client.set_cookie(auth.COOKIE, forged, path="/dashboard")
    assert client.get("/dashboard/").status_code == 302
    # A script may use the bearer header instead
    assert client.get("/dashboard/", headers=AUTH).status_code == 200


def test_the_session_cookie_is_locked_down(app: Flask) -> None:
    client = app.test_client()
    answer = client.post("/dashboard/login", data={"name": "ann", "token": TOKEN})
    cookie = answer.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/dashboard" in cookie
    assert auth.read_session(TOKEN, auth.issue_session(TOKEN, "ann")) == "ann"
    with pytest.raises(auth.BadSession):
        auth.read_session("another-token", auth.issue_session(TOKEN, "ann"))
    with pytest.raises(auth.BadSession):
        auth.read_session(TOKEN, auth.issue_session(TOKEN, "ann", now=time.time() - 13 * 3600))


def test_state_changes_need_the_pages_csrf_token(app: Flask, platform: Platform) -> None:
    client = signed_in(app)
    flag = FLAG
    refused = client.post(f"/dashboard/switches/{flag}", data={"to": "on", "confirm": flag})
    assert refused.status_code == 403 and not platform.flags.is_enabled(flag)
    page = client.get(f"/dashboard/switches/{flag}?to=on")
    assert page.status_code == 200 and b"t_paused" in page.data
    token = csrf_of(page.text)
    unconfirmed = client.post(
        f"/dashboard/switches/{flag}", data={"to": "on", "confirm": "", "csrf_token": token}
    )
    assert unconfirmed.status_code == 400 and not platform.flags.is_enabled(flag)
    done = client.post(
        f"/dashboard/switches/{flag}", data={"to": "on", "confirm": flag, "csrf_token": token}
    )
    assert done.status_code == 302 and platform.flags.is_enabled(flag)
    with session_scope(platform.sessions) as session:
        # (other modules' dashboard tests share this database: only this operator's rows)
        action = session.scalars(
            select(OperatorAction).where(OperatorAction.operator == "ann")
        ).one()
        assert (action.operator, action.action, action.target) == ("ann", "pause", flag)


def test_bad_input_gets_a_page_that_says_so(app: Flask) -> None:
    client = signed_in(app)
    nowhere = client.get("/dashboard/no/such/page")
    assert nowhere.status_code == 404 and b"No such page" in nowhere.data
    assert b"--fg" in client.get("/dashboard/static/dashboard.css").data  # still served
    missing = client.get("/dashboard/jobs/no-such-job")
    assert missing.status_code == 404 and b"No job" in missing.data
    assert client.get("/dashboard/jobs?id=no-such-job").status_code == 302
    assert client.get("/dashboard/jobs?id=" + "x" * 400).status_code == 400
    unknown = client.get("/dashboard/switches/pause_nothing?to=on")
    assert unknown.status_code == 404 and b"No family is paused" in unknown.data
    assert client.get("/dashboard/switches/pause_api2_test_family?to=maybe").status_code == 400
    page = client.get("/dashboard/failed")
    token = csrf_of(page.text)
    refused = client.post("/dashboard/jobs/no-such-job/retry", data={"csrf_token": token})
    assert refused.status_code == 409 and b"not failed any more" in refused.data


def test_a_failed_job_is_retried_from_its_page_and_runs(app: Flask, platform: Platform) -> None:
    # Given a job that failed for good under a real worker
    job_id = enqueue(platform, "dash-1", mode="flaky", times=3)
    with h.running_worker(platform.broker):
        h.wait_until(lambda: h.state(platform.broker, job_id) == "failed")
    client = signed_in(app, "bob")
    listing = client.get("/dashboard/failed")
    assert job_id in listing.text and "Retryable: flaky" in listing.text
    # When bob retries it from the job's page
    page = client.get(f"/dashboard/jobs/{job_id}")
    assert 'id="retry"' in page.text
    answer = client.post(f"/dashboard/jobs/{job_id}/retry", data={"csrf_token": csrf_of(page.text)})
    assert answer.status_code == 302
    # Then it runs again and completes, and the record and the audit name bob
    with h.running_worker(platform.broker):
        h.wait_until(lambda: h.state(platform.broker, job_id) == "completed")
    shown = client.get(f"/dashboard/jobs/{job_id}").text
    assert "completed" in shown and "by bob" in shown
    audit = client.get("/dashboard/audit").text
    assert "retry" in audit and job_id in audit and "waiting" in audit


def test_queues_and_orgs_show_what_redis_holds(app: Flask, platform: Platform) -> None:
    # Given a group of cap 1 (t_serial) with one job admitted and two parked, and no worker
    for item in ("s1", "s2", "s3"):
        enqueue(platform, item, kind="t_serial")
    client = signed_in(app)
    queues = client.get("/dashboard/partials/queues").text
    row = re.search(r'data-queue="t_serial.fast".*?</tr>', queues, re.S)
    assert row is not None
    assert [int(n) for n in re.findall(r"<td>(\d+)</td>", row.group(0))] == [1, 0, 2, 0]
    orgs = client.get("/dashboard/orgs").text
    assert 'data-group="t_serial.fast|7"' in orgs and "0 / 1" in orgs
    assert "How the start time is predicted" in orgs
    # no worker is alive: no start time is promised, on either page
    assert "no worker serves this tier" in orgs
    assert "no worker serves this tier" in row.group(0)


NOW = 1_800_000_000.0  # a minute boundary


def steady(totals: dict[str, int]) -> Rates:
    """``totals`` spread evenly over the 15 whole minutes before ``NOW``."""
    now_minute = int(NOW // 60)
    minutes = [
        (now_minute - 15 + i, Counter({f: n // 15 for f, n in totals.items()})) for i in range(15)
    ]
    return Rates([*minutes, (now_minute, Counter())], NOW)


def test_a_queue_that_began_recently_is_not_diluted() -> None:
    now_minute = int(NOW // 60)
    # 12 runs, all in the last two minutes (the window holds 15): 6 a minute, not 0.8
    rates = Rates(
        [(now_minute - 2, Counter({"q:a": 6})), (now_minute - 1, Counter({"q:a": 6}))], NOW
    )
    assert rates.per_minute("q:a") == pytest.approx(6.0)
    assert rates.per_minute("q:b") == 0.0


def test_the_prediction_follows_the_measured_rates() -> None:
    group = Group("q.fast|7", "q.fast", "q", "fast", "7", 2, running=2, parked=3)
    # 30 runs of the queue and 15 of the group over 15 minutes: 2/min and 1/min
    counts = steady({"q:q.fast": 30, "g:q.fast|7": 15})
    parked = predict(group, counts, None, queue_length=4)
    assert parked.seconds == pytest.approx(60 / 1 + 60 * 4 / 2)
    group.waiting_ids.append("m1")
    waiting = predict(group, counts, 6, queue_length=10)
    assert waiting.seconds == pytest.approx(60 * 6 / 2)
    unknown = predict(group, Rates([], NOW), 6, queue_length=10)
    assert unknown.seconds is None and "no run ended" in unknown.basis


def test_windows_and_schedule_pages(app: Flask, platform: Platform) -> None:
    # Given a windowed job that ran and a tick the scheduler emitted
    job_id = enqueue(platform, "w1", kind="t_window", provider="notion")
    with h.running_worker(platform.broker):
        h.wait_until(lambda: h.state(platform.broker, job_id) == "completed")
    scheduler = TickScheduler(platform)
    tick = platform.ticks[0]
    scheduler.emit_tick(tick)
    scheduler.lock.client.close()
    client = signed_in(app)
    windows = client.get("/dashboard/windows").text
    assert "t_window" in windows and "5 per 1.0 s" in windows
    schedule = client.get("/dashboard/schedule").text
    assert f'data-tick="{tick.name}"' in schedule
    assert "none noted" not in schedule.split(f'data-tick="{tick.name}"')[1].split("</tr>")[0]


def test_redis_down_is_a_503_page(make_platform: MakePlatform) -> None:
    platform = make_platform(services=HARNESS, redis_url="redis://127.0.0.1:1/0")
    client = signed_in(create_app(platform))
    answer = client.get("/dashboard/")
    assert answer.status_code == 503 and b"Redis is unreachable" in answer.data


def test_flipper_sees_the_switch(app: Flask, platform: Platform) -> None:
    client = signed_in(app)
    flag = FLAG
    token = csrf_of(client.get(f"/dashboard/switches/{flag}?to=on").text)
    client.post(
        f"/dashboard/switches/{flag}", data={"to": "on", "confirm": flag, "csrf_token": token}
    )
    with platform.engine.connect() as connection:
        gate = connection.execute(
            text("SELECT value FROM flipper_gates WHERE feature_key = :f AND key = 'boolean'"),
            {"f": flag},
        ).scalar()
    assert gate == "true"
    assert "PAUSED" in client.get("/dashboard/switches").text


def test_an_uncertain_claim_is_resolved_from_the_page(app: Flask, platform: Platform) -> None:
    key = f"dashboard-test-{uuid.uuid4().hex[:8]}"
    other = f"{key}-other"
    assert delivery_claims.claim(platform.sessions, key)
    assert delivery_claims.claim(platform.sessions, other)
    try:
        client = signed_in(app, "cy")
        page = client.get("/dashboard/claims").text
        assert key in page and "in flight" in page
        token = csrf_of(page)
        done = client.post(
            "/dashboard/claims/resolve",
            data={"key": key, "how": "delivered", "csrf_token": token},
        )
        assert done.status_code == 302
        found = delivery_claims.find(platform.sessions, key)
        assert found is not None and found.resolved
        again = client.post(
            "/dashboard/claims/resolve",
            data={"key": key, "how": "release", "csrf_token": token},
        )
        assert again.status_code == 409  # a delivered claim is never released
        released = client.post(
            "/dashboard/claims/resolve", data={"key": other, "how": "release", "csrf_token": token}
        )
        assert released.status_code == 302
        assert delivery_claims.find(platform.sessions, other) is None
        bad = client.post(
            "/dashboard/claims/resolve", data={"key": other, "how": "burn", "csrf_token": token}
        )
        assert bad.status_code == 400
        for how in ("delivered", "release"):  # PostgreSQL text holds no NUL: a 400, not a 500
            nul = client.post(
                "/dashboard/claims/resolve",
                data={"key": f"{key}\x00", "how": how, "csrf_token": token},
            )
            assert nul.status_code == 400 and "NUL" in nul.text
        audit = client.get("/dashboard/audit").text
        assert "claim-delivered" in audit and "claim-release" in audit
    finally:
        with platform.engine.begin() as connection:
            connection.execute(
                text("DELETE FROM outbound_delivery_claims WHERE delivery_key IN (:a, :b)"),
                {"a": key, "b": other},
            )


def test_a_jobs_page_names_its_window_and_group(app: Flask, platform: Platform) -> None:
    windowed = enqueue(platform, "win-1", kind="t_window", provider="notion")
    grouped = enqueue(platform, "grp-1", kind="t_serial")
    client = signed_in(app)
    page = client.get(f"/dashboard/jobs/{windowed}").text
    window = page.split('id="window">')[1].split("</td>")[0]
    assert "<code>notion</code> scope <code>ods-7</code>: 5 per 1 s" in window
    grouped_page = client.get(f"/dashboard/jobs/{grouped}").text
    assert "t_serial.fast|7" in grouped_page and "its family has no window" in grouped_page


def test_a_prefetched_waiting_job_starts_when_a_thread_frees() -> None:
    group = Group("q.fast|7", "q.fast", "q", "fast", "7", 2, running=1, parked=0)
    group.waiting_ids.append("m1")  # waiting, but no longer in the list (prefetched)
    counts = steady({"q:q.fast": 45})  # 3 runs a minute end in the queue
    prediction = predict(group, counts, None, queue_length=0)
    assert prediction.seconds == pytest.approx(20.0) and "prefetched" in prediction.basis


def test_the_ledger_page_shows_rows_in_flight(app: Flask, platform: Platform) -> None:
    # Given an upload with two ledger rows: one open and long unmoved, one completed
    org_id = 900_000 + int(uuid.uuid4().int % 99_999)
    with session_scope(platform.sessions) as session:
        session.add(Organization(id=org_id, name="ledger org"))
        session.flush()
        upload = ConversationUpload(organization_id=org_id, upload_type="audio")
        session.add(upload)
        session.flush()
        upload_id = upload.id
        for kind, state in (("process", "uncertain"), ("sync_completion", "completed")):
            row = ConversationUploadDelivery(
                organization_id=org_id,
                conversation_upload_id=upload_id,
                kind=kind,
                state=state,
                delivery_key=f"conversation-upload/{kind}/{upload_id}",
                last_error="Rails did not answer" if state == "uncertain" else None,
            )
            session.add(row)
            session.flush()
            row.updated_at = utcnow() - timedelta(minutes=30)
        session.commit()
    try:
        page = signed_in(app).get("/dashboard/ledger").text
        rows = page.split('id="ledger-rows"')[1]
        assert "uncertain" in rows and "past grace" in rows and "Rails did not answer" in rows
        assert "sync_completion" not in rows  # completed: not in flight
    finally:
        with platform.engine.begin() as connection:
            for table, column in (
                ("conversation_upload_deliveries", "organization_id"),
                ("conversation_uploads", "organization_id"),
                ("organizations", "id"),
            ):
                connection.execute(text(f"DELETE FROM {table} WHERE {column} = :o"), {"o": org_id})


def test_postgresql_down_a_retry_still_stands_and_switches_say_so(
    make_platform: MakePlatform,
) -> None:
    # Given a platform whose PostgreSQL does not answer, and a failed job in Redis
    platform = make_platform(services=HARNESS, database_url="postgresql://postgres@127.0.0.1:1/x")
    job_id = enqueue(platform, "pg-down", mode="unrecoverable")
    with h.running_worker(platform.broker):
        h.wait_until(lambda: h.state(platform.broker, job_id) == "failed")
    client = signed_in(create_app(platform), "dee")
    token = csrf_of(client.get(f"/dashboard/jobs/{job_id}").text)
    # When it is retried, Then the retry stands (the audit row could not be written)
    answer = client.post(f"/dashboard/jobs/{job_id}/retry", data={"csrf_token": token})
    assert answer.status_code == 302
    assert (platform.broker.jobs.record(job_id) or {})["retried_by"] == "dee"
    # And the pages that need PostgreSQL say so
    switches = client.get("/dashboard/switches")
    assert switches.status_code == 503 and b"PostgreSQL is unreachable" in switches.data


def test_the_parity_page_lists_each_products_shadow_runs(app: Flask, platform: Platform) -> None:
    # Given a diverged report run and upload reading of one organization, a matching counter
    # step of the region, each recorded by its product and read through what it registered
    recorded = record_shadow_runs(platform)
    assert set(platform.parity_sources) == {"maintenance", "reports", "uploads"}
    client = signed_in(app)

    page = client.get("/dashboard/parity").text

    # Then each product and organization has its row, divergences first, linking to its job
    groups = page.split('id="parity-groups"')[1].split("</table>")[0]
    org = recorded.organization_id
    assert groups.index(f'data-parity="reports|{org}"') < groups.index('"maintenance|region"')
    assert re.search(rf'data-parity="uploads\|{org}">.*?<span class="bad">1</span>', groups)
    assert re.search(r'data-parity="maintenance\|region">.*?<span class="ok">0</span>', groups)
    assert "rows: rails 1, native 0" in page and "agent 5: missing from native" in page
    assert "upload gone" in page and f"upload {recorded.upload_id}" in page
    assert "native would fix 2, rails fixed 2, out of parity after 0" in page
    for job_id in (recorded.report_job_id, recorded.counter_job_id, recorded.upload_job_id):
        assert f'href="/dashboard/jobs/{job_id}"' in page
    # One product, and a product no one registered
    only = client.get("/dashboard/parity?product=uploads").text
    assert "upload gone" in only and "agent 5" not in only
    assert client.get("/dashboard/parity?product=nope").status_code == 400


def test_an_unreadable_shadow_source_is_never_shown_as_parity(
    app: Flask, platform: Platform
) -> None:
    def broken(since: object) -> list[ParityRun]:
        raise ConnectionError("redis went away")

    platform.add_parity("reports", broken)
    page = signed_in(app).get("/dashboard/parity").text
    assert 'data-unreadable="reports"' in page and "redis went away" in page
