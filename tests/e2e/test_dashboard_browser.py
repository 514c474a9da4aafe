"""The dashboard in a real browser: Debian's chromium, headless, driven by Selenium through
chromedriver, on pages served over HTTP by the API app (a real threaded server) on real Redis
and PostgreSQL, with a real worker process running the jobs.

The assertions are on what a person sees (table cells, messages) and on what the page's
actions did (a retried job run by the worker, a switch in Flipper's tables). Each page's
screenshot is saved in ``test-artifacts/dashboard/`` (git-ignored). One browser serves the
module. ``scripts/ensure-browser.sh`` (run by ``make services``, so by ``make test``)
installs chromium and chromium-driver; without them these tests skip, except in CI
(``CI`` set), where they fail.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from sqlalchemy import text

from router.requests import JobRequest
from services.app.api import create_app
from services.app.bootstrap import SERVICE_MODULES, Platform
from services.app.scheduler import TickScheduler
from services.rails import delivery_claims
from testkit.ports import free_port
from tests import REPO
from tests import platform_harness as h
from tests.fixtures_platform import CREDENTIALS_KEY, TOKEN, MakePlatform
from tests.shadow_runs import record_shadow_runs

pytestmark = pytest.mark.slow

ARTIFACTS = REPO / "test-artifacts" / "dashboard"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
FLAG = "pause_api2_test_family"

try:
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # the test extra is not installed
    webdriver = None  # type: ignore[assignment]


def _missing() -> str | None:
    if webdriver is None:
        return "selenium is not installed (pip install -e '.[test]')"
    if CHROMIUM is None or CHROMEDRIVER is None:
        return (
            "chromium / chromedriver not installed; as root run scripts/ensure-browser.sh "
            "(apt-get install -y chromium chromium-driver)"
        )
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    reason = _missing()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"browser tests cannot run in CI: {reason}")
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or ""
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in CI and containers
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1360,900",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.implicitly_wait(0)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


@pytest.fixture
def platform(make_platform: MakePlatform) -> Iterator[Platform]:
    platform = make_platform(services=(*SERVICE_MODULES, "tests.platform_harness"))
    platform.flags.set(FLAG, False)
    yield platform
    platform.flags.set(FLAG, False)  # Flipper's tables outlive the test (committed)


@pytest.fixture
def site(platform: Platform) -> Iterator[str]:
    """The API app served over HTTP on a free port (werkzeug's threaded server)."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", free_port(), create_app(platform), threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="dashboard-http", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(timeout=10)


@pytest.fixture
def worker(redis_url: str, namespace: str) -> Iterator[None]:
    """A real worker process over the harness's queues; stopped (SIGTERM, drained) after."""
    process = h.start_worker_process(redis_url, namespace, threads=2)
    yield
    process.terminate()
    process.join(timeout=20)
    if process.is_alive():
        process.kill()
        process.join(timeout=5)


def enqueue(
    platform: Platform, item: str, kind: str = "t_plain", org: int = 7, **params: object
) -> str:
    request = JobRequest(kind=kind, organization_id=org, params={"item": item, **params})
    return platform.router.enqueue_many([request])[0].job_id


def shot(driver: WebDriver, name: str) -> Path:
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def see(driver: WebDriver, css: str) -> str:
    """The text a person sees in the element (waiting for it to be on the page)."""
    WebDriverWait(driver, 10, poll_frequency=0.05).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, css)
    )
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def replaced(element: WebElement) -> Callable[[WebDriver], bool]:
    """Whether ``element`` has left the page: Selenium's ``staleness_of``, which also takes
    chromedriver's other answer when the page is swapped during the check ("Node with given
    id does not belong to the document", a plain WebDriverException) as gone."""

    def predicate(_driver: WebDriver) -> bool:
        try:
            element.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            if "does not belong to the document" in str(exc):
                return True
            raise
        return False

    return predicate


def navigate(driver: WebDriver, action: Callable[[], object]) -> None:
    """Do ``action`` (a click, an accepted dialog) and wait for the next page to load."""
    page = driver.find_element(By.TAG_NAME, "html")
    action()
    WebDriverWait(driver, 10, poll_frequency=0.05).until(replaced(page))


def confirm(driver: WebDriver, button: WebElement) -> None:
    """Press ``button`` and say OK to the dialog that asks first."""
    button.click()
    driver.switch_to.alert.accept()


def click(driver: WebDriver, by: str, value: str) -> None:
    navigate(driver, driver.find_element(by, value).click)


def wait_for(
    driver: WebDriver, condition: Callable[[WebDriver], object], seconds: float = 20
) -> None:
    WebDriverWait(driver, seconds, poll_frequency=0.1).until(condition)


def sign_in(
    driver: WebDriver, site: str, name: str = "Ann Operator", path: str = "/dashboard/"
) -> None:
    driver.delete_all_cookies()
    driver.get(site + path)
    assert "/dashboard/login" in driver.current_url  # not signed in: sent to the form
    driver.find_element(By.ID, "name").send_keys(name)
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    click(driver, By.ID, "sign-in")
    wait_for(driver, lambda d: d.current_url == site + path)


def queue_cells(driver: WebDriver, queue: str) -> list[str]:
    """The queue's row as shown; [] while the live refresh is swapping the table."""
    try:
        cells = driver.find_elements(By.CSS_SELECTOR, f'tr[data-queue="{queue}"] td')
        return [cell.text for cell in cells]
    except StaleElementReferenceException:
        return []


def test_sign_in_refuses_a_wrong_token(browser: WebDriver, site: str) -> None:
    browser.delete_all_cookies()
    browser.get(site + "/dashboard/")
    browser.find_element(By.ID, "name").send_keys("Mallory")
    browser.find_element(By.ID, "token").send_keys("guess")
    click(browser, By.ID, "sign-in")
    assert "not this deployment's" in see(browser, "#problem")
    shot(browser, "login")


def test_queues_refresh_live(browser: WebDriver, site: str, platform: Platform) -> None:
    sign_in(browser, site)
    assert see(browser, "h1") == "Tiers and queues"
    assert queue_cells(browser, "t_serial.fast")[2:7] == ["0", "0", "0", "0", "0"]
    # When three jobs of a cap-1 group arrive (no worker), the open page shows them
    # without a reload: one waiting, two parked
    for item in ("s1", "s2", "s3"):
        enqueue(platform, item, kind="t_serial")
    wait_for(browser, lambda d: queue_cells(d, "t_serial.fast")[2:7] == ["1", "0", "2", "0", "0"])
    tiers = browser.find_element(By.CSS_SELECTOR, 'tr[data-tier="fast"]').text
    assert tiers.split()[:4] == ["fast", "1", "0", "2"]
    shot(browser, "queues")
    # The organizations page: running versus cap, parked, and the prediction's model
    click(browser, By.LINK_TEXT, "Organizations")
    row = see(browser, 'tr[data-group="t_serial.fast|7"]')
    assert "0 / 1" in row and "no worker serves this tier" in row  # no worker: no time
    assert "How the start time is predicted" in see(browser, "#model")
    shot(browser, "orgs")


def test_retry_a_failed_job_and_see_the_worker_run_it(
    browser: WebDriver, site: str, platform: Platform, worker: None
) -> None:
    # Given a job that failed for good under the worker (3 attempts, then it would succeed)
    job_id = enqueue(platform, "browser-1", mode="flaky", times=3)
    h.wait_until(lambda: h.state(platform.broker, job_id) == "failed", timeout=30)
    sign_in(browser, site, name="Bob Oncall", path="/dashboard/failed")
    row = see(browser, f'tr[data-job="{job_id}"]')
    assert "Retryable: flaky" in row
    shot(browser, "failed")
    # When Bob opens it and presses Retry
    click(browser, By.LINK_TEXT, job_id)
    assert see(browser, "#state") == "failed"
    assert "3 ended, 3 failed" in see(browser, "#attempts")
    shot(browser, "job-failed")
    click(browser, By.ID, "retry")
    assert "retried: waiting" in see(browser, "#done")
    # Then the worker runs it again, and the page (reloaded) says so, naming Bob
    h.wait_until(lambda: h.state(platform.broker, job_id) == "completed", timeout=30)
    browser.refresh()
    assert see(browser, "#state") == "completed"
    assert "by Bob Oncall" in see(browser, "#retried")
    assert "4 ended, 0 failed" in see(browser, "#attempts")
    shot(browser, "job-retried")
    click(browser, By.LINK_TEXT, "Audit")
    assert f"Bob Oncall retry {job_id} waiting" in see(browser, "#audit")
    shot(browser, "audit")


def test_discard_asks_first(
    browser: WebDriver, site: str, platform: Platform, worker: None
) -> None:
    job_id = enqueue(platform, "browser-2", mode="unrecoverable")
    h.wait_until(lambda: h.state(platform.broker, job_id) == "failed", timeout=30)
    sign_in(browser, site, path=f"/dashboard/jobs/{job_id}")
    browser.find_element(By.ID, "discard").click()
    browser.switch_to.alert.dismiss()  # thought better of it: nothing happens
    assert see(browser, "#state") == "failed" and not browser.find_elements(By.ID, "done")
    navigate(browser, lambda: confirm(browser, browser.find_element(By.ID, "discard")))
    assert "discarded: discarded" in see(browser, "#done")
    assert "by Ann Operator" in see(browser, "#discarded")
    click(browser, By.LINK_TEXT, "Failed")
    assert see(browser, "#none-failed") == "No failed jobs."


def gate(platform: Platform) -> str | None:
    with platform.engine.connect() as connection:
        value = connection.execute(
            text("SELECT value FROM flipper_gates WHERE feature_key = :f AND key = 'boolean'"),
            {"f": FLAG},
        ).scalar()
    return None if value is None else str(value)


def test_pause_and_resume_a_family(browser: WebDriver, site: str, platform: Platform) -> None:
    sign_in(browser, site, path="/dashboard/switches")
    row = f'tr[data-flag="{FLAG}"]'
    assert "running" in see(browser, row)
    click(browser, By.CSS_SELECTOR, f"{row} a.button")
    # The confirmation names the families and wants the switch's name typed
    assert "t_paused" in see(browser, "main")
    shot(browser, "switch-confirm")
    browser.find_element(By.ID, "confirm-switch").click()  # empty: the browser refuses
    assert gate(platform) is None
    browser.find_element(By.ID, "confirm").send_keys(FLAG)
    click(browser, By.ID, "confirm-switch")
    assert "PAUSED" in see(browser, row)
    assert gate(platform) == "true"  # Flipper's own tables: Rails sees the same switch
    shot(browser, "switches")
    click(browser, By.CSS_SELECTOR, f"{row} a.button")
    browser.find_element(By.ID, "confirm").send_keys(FLAG)
    click(browser, By.ID, "confirm-switch")
    assert "running" in see(browser, row)
    assert gate(platform) is None


def test_unknown_job_windows_and_schedule(
    browser: WebDriver, site: str, platform: Platform, worker: None
) -> None:
    job_id = enqueue(platform, "w1", kind="t_window", provider="notion")
    h.wait_until(lambda: h.state(platform.broker, job_id) == "completed", timeout=30)
    scheduler = TickScheduler(platform)
    scheduler.emit_tick(platform.ticks[0])
    scheduler.lock.client.close()
    sign_in(browser, site, path="/dashboard/jobs")
    browser.find_element(By.ID, "job-id").send_keys("kb-document-sync-999999")
    click(browser, By.ID, "find")
    assert "No job kb-document-sync-999999" in see(browser, "#problem")
    shot(browser, "job-missing")
    click(browser, By.LINK_TEXT, "Windows")
    window = see(browser, "#windows tbody tr")
    assert "t_window" in window and "5 per 1.0 s" in window
    shot(browser, "windows")
    click(browser, By.LINK_TEXT, "Schedule")
    tick = platform.ticks[0]
    emitted = see(browser, f'tr[data-tick="{tick.name}"]')
    assert "added" in emitted or "deduplicated" in emitted
    shot(browser, "schedule")


def test_resolve_an_uncertain_delivery_claim(
    browser: WebDriver, site: str, platform: Platform
) -> None:
    key = f"browser-claim-{uuid.uuid4().hex[:8]}"
    assert delivery_claims.claim(platform.sessions, key)
    try:
        sign_in(browser, site, path="/dashboard/claims")
        row = f'tr[data-key="{key}"]'
        assert "in flight" in see(browser, row)
        shot(browser, "claims")
        mark = browser.find_element(By.CSS_SELECTOR, f"{row} button.mark")
        navigate(browser, lambda: confirm(browser, mark))
        assert f"{key}: marked" in see(browser, "#done")
        claim = delivery_claims.find(platform.sessions, key)
        assert claim is not None and claim.resolved
        assert not browser.find_elements(By.CSS_SELECTOR, row)
        click(browser, By.LINK_TEXT, "Ledger")
        assert see(browser, "h1") == "Upload delivery ledger: rows in flight"
        shot(browser, "ledger")
    finally:
        with platform.engine.begin() as connection:
            connection.execute(
                text("DELETE FROM outbound_delivery_claims WHERE delivery_key = :k"), {"k": key}
            )


def test_a_live_speedtier_api_serves_it(
    browser: WebDriver, redis_url: str, database_url: str, namespace: str
) -> None:
    """`speedtier api` itself (gunicorn, production settings: the session cookie is Secure,
    which the browser keeps for http://127.0.0.1, a trustworthy origin)."""
    port = free_port()
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_ENV": "production",
        "SPEEDTIER_ALLOW_VOLATILE_REDIS": "1",  # the test Redis runs without AOF
        "INTERNAL_API_TOKEN": TOKEN,
        "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY": CREDENTIALS_KEY,
    }
    command = [sys.executable, "-m", "services.app.cli", "api", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--workers", "1"], cwd=REPO, env=env, stderr=subprocess.DEVNULL
    )
    site = f"http://127.0.0.1:{port}"
    try:
        h.wait_until(lambda: _answers(site + "/healthz"), timeout=60)
        sign_in(browser, site, name="Prod Operator")
        assert see(browser, "h1") == "Tiers and queues"
        assert queue_cells(browser, "kb_document_sync.fast")[:2] == ["fast", "kb_document_sync"]
        cookie = browser.get_cookie("speedtier_operator")
        assert cookie is not None and cookie["secure"] and cookie["httpOnly"]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=40)
    assert process.returncode == 0


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=5).status_code == 200
    except requests.RequestException:  # not listening yet, or still booting its worker
        return False


def test_the_parity_page_shows_each_products_divergences(
    browser: WebDriver, site: str, platform: Platform
) -> None:
    recorded = record_shadow_runs(platform)
    sign_in(browser, site)
    click(browser, By.LINK_TEXT, "Parity")
    org = recorded.organization_id
    reports = see(browser, f'tr[data-parity="reports|{org}"]')
    assert reports.split() == ["reports", str(org), "1", "1"]
    assert see(browser, 'tr[data-parity="maintenance|region"]').split()[-1] == "0"
    runs = see(browser, f'table[data-group="uploads|{org}"]')
    assert "diverged" in runs and "upload gone" in runs
    shot(browser, "parity")
    click(browser, By.LINK_TEXT, recorded.report_job_id)
    assert recorded.report_job_id in browser.current_url
