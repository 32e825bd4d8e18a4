"""The console in a real Chromium against the distributed system (uvicorn, workers, sweeper on
PostgreSQL and Redis, a Stripe sandbox): sign in, watch a refund's operation go from open to
VERIFIED without reloading the page, and read its timeline's readbacks and events."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.conftest import screenshot
from tests.browser.console_system import sign_in
from tests.e2e.launcher import DistributedSystem, running_system
from tests.e2e.sdk_world import World, new_world


@pytest.fixture(scope="module")
def world(
    postgres_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    workdir: Path = tmp_path_factory.mktemp("console")
    with running_system(postgres_url, redis_url, workdir, name="console") as system:
        yield new_world(system, "console")


def _cell(driver: webdriver.Chrome, name: str) -> str:
    """A summary cell's text, read in one script: the page's polling re-renders the summary, so
    an element found by one WebDriver call may be replaced before the next reads it."""
    return str(
        driver.execute_script(
            "const c = document.querySelector(arguments[0]); return c ? c.innerText : '';",
            f'#summary [data-field="{name}"]',
        )
    )


def test_an_operation_goes_verified_on_screen_and_its_timeline_shows_the_evidence(
    browser: webdriver.Chrome, world: World
) -> None:
    system: DistributedSystem = world.system
    charge = world.charge()
    api = httpx.Client(
        base_url=system.api_url,
        headers={"Authorization": f"Bearer {world.api_key}"},
        timeout=30,
    )
    with api:
        created = api.post(
            "/v1/operations",
            json={
                "contract": "stripe.refund.succeeded",
                "input": {"charge": charge, "amount": 2000, "currency": "usd"},
            },
        )
        assert created.status_code == 201, created.text
        op_id = created.json()["id"]
        sign_in(browser, system.api_url, world.api_key)
        browser.get(f"{system.api_url}/console/operations/{op_id}")
        assert _cell(browser, "final") == "no"
        browser.execute_script("window.__notReloaded = true;")
        refund = world.stripe_client().v1.refunds.create(
            params={"charge": charge, "amount": 2000}, options={"idempotency_key": op_id}
        )
        reported = api.post(
            f"/v1/operations/{op_id}/action",
            json={"phase": "result", "result": refund.to_dict(), "http_status": 200},
        )
        assert reported.status_code == 200, reported.text
        WebDriverWait(browser, 120, poll_frequency=0.5).until(
            lambda driver: _cell(driver, "verdict") == "VERIFIED"
        )
        assert browser.execute_script("return window.__notReloaded === true;")
        assert _cell(browser, "state") == "VERIFIED"
        WebDriverWait(browser, 60, poll_frequency=0.5).until(
            lambda driver: driver.find_elements(By.CSS_SELECTOR, '#timeline [data-kind="event"]')
        )
        timeline = api.get(f"/v1/operations/{op_id}/timeline").json()["entries"]
        browser.refresh()  # the page as a person opens it later: every entry of the API's view
        kinds = browser.execute_script(
            "return [...document.querySelectorAll('#timeline tbody tr')]"
            ".map((row) => row.getAttribute('data-kind'));"
        )
        assert kinds[: len(timeline)] == [entry["kind"] for entry in timeline]
        assert "observation" in kinds
        assert "event" in kinds
        text = browser.execute_script("return document.getElementById('timeline').innerText;")
        for entry in timeline:
            if entry["kind"] == "event":
                assert entry["event_id"] in text
            if entry["kind"] == "observation":
                assert entry["channel"] in text
        screenshot(browser, "console-operation")
        browser.get(f"{system.api_url}/console/operations")
        assert op_id in browser.find_element(By.ID, "operations").text
        screenshot(browser, "console-operations")
