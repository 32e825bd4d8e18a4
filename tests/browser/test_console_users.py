"""Console users in a real Chromium: an admin signed in with the admin key creates a user on the
Users page and reads its password once; the user signs in with email and password and sees the
workspace's operations; the admin disables the user and the user's open session dies."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.conftest import screenshot
from tests.browser.console_system import LoneIngress, lone_ingress, sign_in


@pytest.fixture
def ingress(tmp_path: Path) -> Iterator[LoneIngress]:
    with lone_ingress(tmp_path) as running:
        yield running


def test_an_admin_creates_a_user_who_signs_in_until_disabled(
    browser: webdriver.Chrome, ingress: LoneIngress
) -> None:
    headers = {"Authorization": f"Bearer {ingress.admin_key}"}
    with httpx.Client(base_url=ingress.url, headers=headers, timeout=30) as api:
        created = api.post(
            "/v1/operations",
            json={
                "contract": "stripe.refund.succeeded",
                "input": {"charge": "ch_users", "amount": 500, "currency": "usd"},
            },
        )
        assert created.status_code == 201, created.text
        op_id = created.json()["id"]
        sign_in(browser, ingress.url, ingress.admin_key)
        browser.find_element(By.ID, "nav-users").click()
        WebDriverWait(browser, 30).until(seen.presence_of_element_located((By.ID, "new-email")))
        browser.find_element(By.ID, "new-email").send_keys("ana@example.com")
        browser.find_element(By.ID, "create").click()
        password = (
            WebDriverWait(browser, 30)
            .until(seen.presence_of_element_located((By.ID, "new-password")))
            .text.strip()
        )
        screenshot(browser, "console-users")
        assert password.startswith("cu_")
        user_id = password.split(".")[0]
        browser.find_element(By.ID, "sign-out").click()
        WebDriverWait(browser, 30).until(seen.presence_of_element_located((By.ID, "email")))
        browser.find_element(By.ID, "email").send_keys("ana@example.com")
        browser.find_element(By.ID, "password").send_keys(password)
        browser.find_element(By.ID, "sign-in").click()
        WebDriverWait(browser, 30).until(seen.presence_of_element_located((By.ID, "operations")))
        assert "ana@example.com" in browser.find_element(By.CLASS_NAME, "who").text
        assert browser.find_elements(By.CSS_SELECTOR, f'tr[data-op-id="{op_id}"]')
        assert not browser.find_elements(By.ID, "nav-users")
        disabled = api.delete(f"/v1/console-users/{user_id}")
        assert disabled.status_code == 200, disabled.text
    browser.get(f"{ingress.url}/console/operations")
    WebDriverWait(browser, 30).until(seen.presence_of_element_located((By.ID, "sign-in")))
    assert browser.current_url.endswith("/console/sign-in")
    assert not browser.find_elements(By.ID, "operations")
