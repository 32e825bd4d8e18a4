"""A real headless Chromium for the browser tests, driven by Selenium.

The browser is Debian's `chromium` and its driver Debian's `chromium-driver`
(`/usr/bin/chromium`, `/usr/bin/chromedriver`; `.ci/run` installs them): the distribution ships
the two at the same version, so Selenium never downloads a driver or a browser. Without them the
tests fail with the command that installs them in CI (`CI` set) and skip on a workstation.

`PROVELY_CHROMIUM` and `PROVELY_CHROMEDRIVER` point elsewhere. A test that takes a screenshot for
the docs calls `screenshot(driver, name)`: it writes `name.png` only when `PROVELY_SCREENSHOTS`
names a directory (`PROVELY_SCREENSHOTS=docs/images`), so a test run leaves the tree untouched.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = os.environ.get("PROVELY_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("PROVELY_CHROMEDRIVER", "/usr/bin/chromedriver")
INSTALL = "apt-get install -y chromium chromium-driver"


def _require_browser() -> None:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    if not missing:
        return
    message = f"{', '.join(missing)} not found; the browser tests need Debian's: {INSTALL}"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def new_driver(*, width: int = 1280, height: int = 900) -> webdriver.Chrome:
    """A headless Chromium with a fresh profile, at a fixed window size (stable screenshots)."""
    _require_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # the tests run as root in CI
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        f"--window-size={width},{height}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    return driver


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    """One browser per test: no cookie or storage of one test is seen by another."""
    driver = new_driver()
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: webdriver.Chrome, name: str) -> Path | None:
    """Saves the window as `<PROVELY_SCREENSHOTS>/<name>.png` when that variable is set."""
    directory = os.environ.get("PROVELY_SCREENSHOTS")
    if not directory:
        return None
    path = Path(directory) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))
    return path
