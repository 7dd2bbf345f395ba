"""The operator page in a real headless Chromium (issue 14): sign in, watch an upstream's
breaker open after it is killed, click a purge button, see the count change.

Needs Debian's ``chromium`` and ``chromium-driver`` and ``selenium`` (the dev extra); CI
installs them. Nothing downloads a browser: the driver and the browser are the system's.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adcp_stale_cache.demo.processes import App, free_port

from ..servers import START_SECONDS

pytestmark = pytest.mark.e2e
TOKEN = "browser-test-token-0123456789"
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture
def browser() -> Iterator[Any]:
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install; CI has them)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium (the dev extra)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--window-size=1280,760", "--disable-gpu"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def ask(seller: App, principal: str) -> None:
    httpx.post(f"{seller.url}/api/get_products", json={}, timeout=10,
               headers={"Authorization": f"Bearer {principal}"})  # fmt: skip


def test_operator_page_in_chromium(browser: Any, tmp_path: Path) -> None:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    inventory = App("inventory-service", free_port(), quiet=True)
    seller = App("seller", free_port(), "--inventory-service", inventory.url,
                 "--freshness-target", "1", "--admin-token", TOKEN, quiet=True)  # fmt: skip
    try:
        for app in (inventory, seller):
            app.start()
        for app in (inventory, seller):
            app.wait(START_SECONDS)
        for principal in ("alice", "bob"):  # two callers: two entries
            ask(seller, principal)

        def text(selector: str) -> str:
            """The element's text now ("" while absent: the page re-renders every 2 s)."""
            try:
                return str(browser.find_element(By.CSS_SELECTOR, selector).text)
            except (NoSuchElementException, StaleElementReferenceException):
                return ""

        def click(selector: str) -> None:
            for _ in range(20):  # the row may be re-rendered between finding and clicking
                try:
                    browser.find_element(By.CSS_SELECTOR, selector).click()
                    return
                except StaleElementReferenceException:
                    time.sleep(0.05)
            raise AssertionError(f"could not click {selector}")

        def until(condition: Any) -> None:
            WebDriverWait(browser, 10, poll_frequency=0.1).until(lambda _: condition())

        browser.get(f"{seller.url}/admin")  # redirected to /admin/: the sign-in form
        browser.find_element(By.ID, "token").send_keys("wrong")
        browser.find_element(By.ID, "sign-in").click()
        until(lambda: text(".error") == "Wrong token.")
        browser.find_element(By.ID, "token").send_keys(TOKEN)
        browser.find_element(By.ID, "sign-in").click()
        upstream = '#upstreams tr[data-upstream="inventory-service"]'
        entries = '#surfaces tr[data-surface="get_products"] td.entries'
        until(lambda: text(f"{upstream} td:nth-child(2)") == "closed")
        assert text(entries) == "2"

        inventory.kill()
        time.sleep(1.1)  # past the 1 s freshness target: each request refreshes, and fails
        for principal in ("alice", "bob", "alice"):
            ask(seller, principal)  # three failures open the breaker
        until(lambda: text(f"{upstream} td:nth-child(2)") == "open")
        assert text(f"{upstream} td:nth-child(3)").startswith("CONNECTION_REFUSED")
        shot = Path(os.environ.get("ADCP_STALE_CACHE_SCREENSHOT", tmp_path / "admin.png"))
        assert browser.save_screenshot(str(shot)) and shot.read_bytes()[:4] == b"\x89PNG"

        click(f"{upstream} button.hard")  # Forget: a hard purge of the upstream's entries
        until(lambda: text("#outcome") == "2 entries invalidated")
        until(lambda: text(entries) == "0")
        assert browser.get_cookies()[0]["httpOnly"] is True
    finally:
        for app in (inventory, seller):
            app.stop()
