"""An on-call operator's day in a real browser (headless chromium through Selenium, as in
``test_dashboard_browser``), on realistic data: 24 organizations, about 270 jobs (60 failed
for two causes, 96 delayed, one tenant with 40 jobs parked behind a hung one), a paused
kill switch and tiers no worker serves, with a real worker process running the jobs.

Two scenarios, end to end through the pages:

* a tenant is stuck: found on Organizations (its group full, 40 parked), followed to the job
  holding its slot (Busy, with the worker's host and pid), cancelled; its parked jobs run.
* a provider failed for one tenant overnight: Failed filtered by that organization and
  error class, Retry all confirmed with the count stated; the jobs run and complete.

Every page is saved as a screenshot in ``test-artifacts/dashboard/`` (git-ignored).
"""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
from collections.abc import Iterator

import pytest

from router.requests import JobRequest
from services.app.bootstrap import SERVICE_MODULES, Platform
from services.app.dashboard import actions
from services.app.dashboard.failures import all_failures
from tests import platform_harness as h
from tests.e2e import test_dashboard_browser as base
from tests.e2e.test_dashboard_browser import FLAG, click, navigate, see, shot, sign_in, wait_for
from tests.fixtures_platform import MakePlatform

pytestmark = pytest.mark.slow

# The browser (one per module) and the served app, as the dashboard's first browser tests have.
browser = base.browser
site = base.site

try:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import Select
except ImportError:  # the test extra is not installed (the browser fixture skips)
    pass

ORGS = range(1, 25)
STUCK = 13  # its first t_serial job hangs, 40 more parked behind it
OVERNIGHT = 5  # its provider failed: 10 jobs failed with Retryable


@pytest.fixture
def platform(make_platform: MakePlatform) -> Iterator[Platform]:
    platform = make_platform(services=(*SERVICE_MODULES, "tests.platform_harness"))
    platform.flags.set(FLAG, False)
    yield platform
    platform.flags.set(FLAG, False)  # Flipper's tables outlive the test (committed)


@pytest.fixture
def worker(redis_url: str, namespace: str) -> Iterator[None]:
    process = h.start_worker_process(redis_url, namespace, threads=4, cancel_grace_seconds=5)
    yield
    process.terminate()
    process.join(timeout=20)
    if process.is_alive():
        process.kill()
        process.join(timeout=5)


def job(kind: str, org: int, item: str, **params: object) -> JobRequest:
    return JobRequest(kind=kind, organization_id=org, params={"item": item, **params})


def seed(platform: Platform) -> str:
    """The night's state; returns the hung job's id."""
    hung = platform.router.enqueue(job("t_serial", STUCK, "hung", mode="steps", times=3000))
    requests = [job("t_serial", STUCK, f"stuck-{i}") for i in range(40)]
    for org in ORGS:
        requests += [job("t_plain", org, f"late-{org}-{i}", mode="delay_long") for i in range(4)]
        requests += [job("t_plain", org, f"bad-{org}-{i}", mode="unrecoverable") for i in range(2)]
        if org != STUCK:
            requests += [job("t_serial", org, f"fine-{org}-{i}") for i in range(3)]
    requests += [job("t_plain", OVERNIGHT, f"night-{i}", mode="flaky", times=3) for i in range(10)]
    platform.router.enqueue_many(requests)
    # A kill switch raised last night by someone else
    actions.set_switch(platform, "Night Owl", FLAG, True)
    return hung.job_id


def failed_of(platform: Platform, org: str, error: str = "") -> int:
    return sum(
        1
        for f in all_failures(platform)
        if f.org == org and f.actionable and (not error or f.error_class == error)
    )


def test_an_operators_day(browser: WebDriver, site: str, platform: Platform, worker: None) -> None:
    # Given the night's state, the worker having run what it could
    hung = seed(platform)
    h.wait_until(lambda: len([f for f in all_failures(platform) if f.actionable]) == 58, 60)
    h.wait_until(lambda: h.state(platform.broker, hung) == "active", 20)
    sign_in(browser, site, name="Ann Oncall", path="/dashboard/")
    # The Queues page says why work waits: a paused family, tiers nothing serves
    paused = see(browser, 'tr[data-queue="t_paused.fast"] td.note')
    assert paused.startswith(f"paused by {FLAG} since ") and paused.endswith("by Night Owl")
    nothing = [
        cell.text
        for cell in browser.find_elements(By.CSS_SELECTOR, "tr[data-queue$='.slow'] td.note")
    ]
    assert nothing and all("no worker serves this tier" in text for text in nothing)
    shot(browser, "operator-queues")

    # -- a tenant is stuck --------------------------------------------------------------------
    click(browser, By.LINK_TEXT, "Organizations")
    group = f'tr[data-group="t_serial.fast|{STUCK}"]'
    row = see(browser, group)
    assert "1 / 1" in row and " 40 " in f" {row} "
    shot(browser, "operator-orgs")
    click(browser, By.CSS_SELECTOR, f"{group} a.holders")
    holder = see(browser, f'tr[data-job="{hung}"]')
    assert f"{STUCK}" in holder and " pid " in holder and "active" in holder
    shot(browser, "operator-holders")
    button = browser.find_element(By.CSS_SELECTOR, f'tr[data-job="{hung}"] button.cancel')
    navigate(browser, lambda: _confirm(browser, button, "Cancel " + hung))
    assert see(browser, "#done") == "cancel: requested"
    h.wait_until(lambda: h.state(platform.broker, hung) == "cancelled", 10)
    h.wait_until(lambda: h.state(platform.broker, "serial-stuck-39") == "completed", 30)
    browser.refresh()
    assert see(browser, "#state") == "cancelled"
    assert "Cancelled: cancelled by Ann Oncall" in see(browser, "#last-error")
    browser.get(f"{site}/dashboard/orgs/{STUCK}")
    assert see(browser, "#no-parked") == "No parked job."
    shot(browser, "operator-tenant-unstuck")

    # -- a provider failed for one tenant overnight ---------------------------------------------
    click(browser, By.LINK_TEXT, "Failed")
    assert "58 failed job(s) match" in see(browser, "#matching")
    shot(browser, "operator-failed")
    Select(browser.find_element(By.ID, "filter-org")).select_by_value(str(OVERNIGHT))
    Select(browser.find_element(By.ID, "filter-error")).select_by_value("Retryable")
    Select(browser.find_element(By.ID, "filter-since")).select_by_value("24")
    click(browser, By.ID, "apply")
    assert see(browser, "#matching").startswith("10 failed job(s) match")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#failed tbody tr")) == 10
    shot(browser, "operator-failed-filtered")
    retry = browser.find_element(By.ID, "bulk-retry")
    navigate(browser, lambda: _confirm(browser, retry, "Retry 10 failed job(s)"))
    assert see(browser, "#done") == "retried 10 of 10 failed job(s)"
    h.wait_until(
        lambda: all(h.state(platform.broker, f"plain-night-{i}") == "completed" for i in range(10)),
        30,
    )
    # The tenant's other failures (another cause) were left alone
    assert failed_of(platform, str(OVERNIGHT)) == 2
    browser.get(f"{site}/dashboard/orgs/{OVERNIGHT}")
    assert "Unrecoverable: 2" in see(browser, "main")
    shot(browser, "operator-tenant")
    click(browser, By.LINK_TEXT, "Busy")
    see(browser, "h1")
    shot(browser, "operator-busy")
    click(browser, By.LINK_TEXT, "Audit")
    audit = see(browser, "#audit")
    assert f"Ann Oncall bulk-retry error=Retryable org={OVERNIGHT} since=24 10 done" in audit
    assert f"Ann Oncall cancel {hung} requested" in audit
    assert f"Night Owl pause {FLAG} paused" in audit
    shot(browser, "operator-audit")


def _confirm(driver: WebDriver, button: object, says: str) -> None:
    """Press ``button``; the dialog must state ``says`` (the count) before it is accepted."""
    button.click()  # type: ignore[attr-defined]
    alert = driver.switch_to.alert
    assert says in alert.text
    alert.accept()


def test_the_dashboard_refuses_to_be_framed(browser: WebDriver, site: str) -> None:
    # Given another site (another origin: localhost, not 127.0.0.1) whose page frames the
    # dashboard's sign-in form
    html = f"<iframe id=f src='{site}/dashboard/login' width=600 height=400></iframe>"
    with _page_server(html) as other:
        browser.get(other)
        wait_for(browser, lambda d: d.find_elements(By.ID, "f"))
        time.sleep(0.5)  # the frame's navigation is refused, or would have drawn by now
        browser.switch_to.frame("f")
        # Then the browser draws nothing of the dashboard in it (frame-ancestors 'none')
        assert not browser.find_elements(By.ID, "token")
        browser.switch_to.default_content()
    shot(browser, "operator-framed")


@contextlib.contextmanager
def _page_server(html: str) -> Iterator[str]:
    """A site serving ``html`` at / on http://localhost:<free port>."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_port}/"
    finally:
        server.shutdown()
        thread.join(timeout=5)
