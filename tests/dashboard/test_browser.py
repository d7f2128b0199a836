"""Browser tests in headless Chromium (Debian's ``chromium`` and ``chromium-driver``;
``scripts/ensure-chromium.sh`` installs them) against a live server on 127.0.0.1.

Screenshots of the main pages go to ``$MILLRACE_SCREENSHOTS`` when it is set (the docs'
ones: ``MILLRACE_SCREENSHOTS=docs/images``), else to the test's temporary directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from pytest_django.live_server_helper import LiveServer

from millrace_django import job, tenant
from millrace_django.clock import SystemClock
from millrace_django.contract import JobState
from millrace_django.runtime.worker_registry import WorkerRegistration
from millrace_django.testing import JobRunner
from tests.dashboard.sample import World, runner_now, seed

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,900",
]

pytestmark = pytest.mark.skipif(
    not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)),
    reason="needs Debian's chromium and chromium-driver: run scripts/ensure-chromium.sh",
)


@pytest.fixture
def browser() -> Iterator[object]:
    profile = tempfile.mkdtemp(prefix="millrace-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    target = Path(os.environ.get("MILLRACE_SCREENSHOTS") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    return target


@pytest.fixture
def live_server(transactional_db: None) -> Iterator[LiveServer]:
    """Django's live server thread, on 127.0.0.1 (any free port), for this test only."""
    server = LiveServer("127.0.0.1")
    yield server
    server.stop()


@pytest.fixture
def live_world(transactional_db: None, settings) -> Iterator[tuple[JobRunner, World]]:
    # Workers that beat every 30 s stay alive through a test (the demo's 1 s: gone in 3).
    settings.MILLRACE = {**settings.MILLRACE, "HEARTBEAT": 30}
    runner = runner_now()
    with runner.installed():
        world = seed(runner)
        for name, queues, held in (
            ("web-1", ["default", "emails"], 3),
            ("reports-1", ["reports"], 1),
        ):
            registration = WorkerRegistration(  # seen now by the live server's clock
                runner.storage, SystemClock(), worker_id=name, queues=queues, concurrency=4
            )
            runner.storage.record_worker_heartbeat(registration.heartbeat(held))
        User.objects.create_superuser("ops", "ops@example.com", "correct horse")
        yield runner, world


def screenshot(driver, folder: Path, name: str) -> None:
    """A full-page PNG (the window grows to the page's height first)."""
    WebDriverWait(driver, 10).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )
    height = driver.execute_script(
        "return Math.max(document.documentElement.scrollHeight, ...Array.from("
        "document.querySelectorAll('#container, #main, #content'), e => e.scrollHeight"
        " + e.getBoundingClientRect().top + window.scrollY))"
    )
    chrome = driver.execute_script("return window.outerHeight - window.innerHeight")
    driver.set_window_size(1400, min(max(height, 700), 2600) + chrome)
    driver.save_screenshot(str(folder / f"dashboard-{name}.png"))
    driver.set_window_size(1400, 900)


def log_in(driver, base: str) -> None:
    driver.get(f"{base}/admin/login/?next=/admin/")
    driver.find_element(By.NAME, "username").send_keys("ops")
    driver.find_element(By.NAME, "password").send_keys("correct horse")
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(driver, 10).until(ec.url_to_be(f"{base}/admin/"))


def test_an_operator_finds_filters_opens_and_cancels_a_job(browser, live_server, live_world, shots):
    runner, world = live_world
    driver, base = browser, live_server.url
    log_in(driver, base)
    assert "MILLRACE" in driver.find_element(By.ID, "content-main").text.upper()
    screenshot(driver, shots, "admin-index")

    driver.get(f"{base}/admin/millrace/")
    assert driver.find_element(By.TAG_NAME, "h1").text == "Overview"
    dead = driver.find_element(By.CSS_SELECTOR, '[data-state="dead"] .mr-n').text
    assert dead == "2"
    census = driver.find_element(By.ID, "mr-census").text
    assert census == "2 alive, 4 jobs in flight of 8 slots"
    screenshot(driver, shots, "overview")

    driver.find_element(By.LINK_TEXT, "Jobs").click()
    driver.find_element(By.CSS_SELECTOR, '#mr-filter input[name=state][value="enqueued"]').click()
    driver.find_element(By.CSS_SELECTOR, "#mr-filter input[type=submit]").click()
    WebDriverWait(driver, 10).until(ec.url_contains("state=enqueued"))
    rows = driver.find_elements(By.CSS_SELECTOR, "#mr-jobs tbody tr[data-job]")
    assert {row.get_attribute("data-job") for row in rows} == {
        str(world.enqueued),
        str(world.tenanted),
    }
    assert all("enqueued" in row.text for row in rows)
    screenshot(driver, shots, "jobs")

    driver.find_element(By.CSS_SELECTOR, f'tr[data-job="{world.enqueued}"] a').click()
    WebDriverWait(driver, 10).until(ec.url_contains(str(world.enqueued)))
    assert "2026-11" in driver.find_element(By.ID, "mr-arguments").text
    driver.find_element(By.ID, "mr-cancel").click()
    WebDriverWait(driver, 10).until(ec.alert_is_present()).accept()
    message = WebDriverWait(driver, 10).until(
        ec.visibility_of_element_located((By.CSS_SELECTOR, ".messagelist .success"))
    )
    assert message.text == f"Job {world.enqueued} cancelled."
    assert "cancelled" in driver.find_element(By.CSS_SELECTOR, ".mr-badge").text
    runner.assert_state(world.enqueued, JobState.CANCELLED)


def test_screenshots_of_the_detail_pages(browser, live_server, live_world, shots):
    _, world = live_world
    driver, base = browser, live_server.url
    log_in(driver, base)
    pages = {
        "job-dead": f"/admin/millrace/jobs/{world.dead}/",
        "job-report": f"/admin/millrace/jobs/{world.report}/",
        "recurring": "/admin/millrace/recurring/",
        "instances": "/admin/millrace/instances/",
        "instance": f"/admin/millrace/instances/{world.waiting_instance}/",
        "instance-suspended": f"/admin/millrace/instances/{world.suspended_instance}/",
        "signals": f"/admin/millrace/signals/?name=approved&correlation_id={world.order_id}",
        "queues": "/admin/millrace/queues/",
    }
    for name, path in pages.items():
        driver.get(base + path)
        assert "Django administration" in driver.find_element(By.ID, "header").text, name
        screenshot(driver, shots, name)
    driver.get(base + pages["instance"])
    node = driver.find_element(By.CSS_SELECTOR, '.mr-graph [data-node="sig1"]')
    assert "mr-node-waiting" in node.get_attribute("class")
    assert sorted(p.name for p in shots.glob("dashboard-*.png"))


@job
def build_the_weekly_sales_report_for_every_region() -> None:
    """A recurring job whose names run long, as real ones do."""


def in_sight(driver, selector: str) -> list[bool]:
    """For each element ``selector`` matches: whether all of it shows as the page opens,
    nothing scrolled (a table's part that must be scrolled to, or is clipped, does not):
    its leftmost and rightmost points at mid-height are its own (2 px in: a box with a
    fractional edge is painted from the pixel it is snapped to)."""
    return driver.execute_script(
        "function shows(e, x, y) {"
        "  var hit = document.elementFromPoint(x, y);"
        "  return hit !== null && (hit === e || e.contains(hit));"
        "}"
        "return Array.from(document.querySelectorAll(arguments[0]), function (e) {"
        "  var box = e.getBoundingClientRect(), y = box.top + box.height / 2;"
        "  return shows(e, box.left + 2, y) && shows(e, box.right - 2, y);"
        "});",
        selector,
    )


def test_every_action_button_of_the_recurring_list_is_in_sight(browser, live_server, live_world):
    runner, _ = live_world
    with tenant("acme-corporation-emea"):
        runner.client.upsert_recurring(
            "weekly-sales-report-for-every-region",
            build_the_weekly_sales_report_for_every_region,
            cron="30 6 * * MON-FRI",
            timezone="America/Argentina/Buenos_Aires",
        )
    driver, base = browser, live_server.url
    log_in(driver, base)
    driver.get(f"{base}/admin/millrace/recurring/")
    buttons = "#mr-recurring td button"
    assert in_sight(driver, buttons) == [True] * 4  # Trigger now and Disable, two rows
