"""The console's settings screens in a real Chromium (#36), against a lone ingress process:
a key created with a scope is shown once and, revoked on screen, is refused by the API; a
webhook secret rotated on screen lets deliveries signed with the old and the new secret in
during the overlap while a stranger's is refused and listed with why; the check reads a Stripe
sandbox with the stored credential; a contract with a lint error comes back with the error
beside its line, and a clean one is stored and has its page."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import Select, WebDriverWait

from services.sandbox.runner import RunningSandbox, run_sandbox
from shared.trust.registry import SHIPPED_CONTRACTS_DIR
from shared.trust.signatures import STRIPE
from tests.browser.conftest import screenshot
from tests.browser.console_system import LoneIngress, lone_ingress, sign_in

OLD_SECRET = "whsec_browser_old_" + "c3" * 16
NEW_SECRET = "whsec_browser_new_" + "d4" * 16
SANDBOX_KEY = "sk_test_console_browser"
EXAMPLE = SHIPPED_CONTRACTS_DIR / "examples" / "app.entitlement.revoked.yaml"


@pytest.fixture
def ingress(tmp_path: Path) -> Iterator[LoneIngress]:
    with lone_ingress(tmp_path) as running:
        yield running


def _wait_for(driver: webdriver.Chrome, element_id: str) -> None:
    WebDriverWait(driver, 30).until(seen.presence_of_element_located((By.ID, element_id)))


def _text(driver: webdriver.Chrome, selector: str) -> str:
    return str(
        driver.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';",
            selector,
        )
    )


def _submit(driver: webdriver.Chrome, selector: str) -> None:
    """Clicks a form's button and waits for the next page."""
    old = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.CSS_SELECTOR, selector).click()
    WebDriverWait(driver, 30).until(seen.staleness_of(old))


def test_a_key_created_on_screen_is_shown_once_and_refused_once_revoked(
    browser: webdriver.Chrome, ingress: LoneIngress
) -> None:
    sign_in(browser, ingress.url, ingress.admin_key)
    browser.find_element(By.ID, "nav-settings").click()
    _wait_for(browser, "keys")
    Select(browser.find_element(By.ID, "key-scope")).select_by_value("agent")
    browser.find_element(By.ID, "key-name").send_keys("refund agent")
    _submit(browser, "#create-key-submit")
    plain = browser.find_element(By.ID, "new-key").text
    assert plain.startswith("pv_")
    row = browser.find_element(By.XPATH, "//table[@id='keys']//tr[td[contains(., 'refund agent')]]")
    key_id = str(row.get_attribute("data-key-id"))
    assert row.find_element(By.CSS_SELECTOR, '[data-field="scope"]').text == "agent"
    screenshot(browser, "console-settings-keys")

    with httpx.Client(base_url=ingress.url, timeout=30) as api:
        mine = {"Authorization": f"Bearer {plain}"}
        assert api.get("/v1/operations", headers=mine).status_code == 200
        browser.get(f"{ingress.url}/console/settings/keys")
        assert plain not in browser.page_source  # shown once
        row = browser.find_element(By.CSS_SELECTOR, f'tr[data-key-id="{key_id}"]')
        assert row.find_element(By.CSS_SELECTOR, '[data-field="last-used"]').text != "never"
        _submit(browser, f'tr[data-key-id="{key_id}"] button.revoke')
        assert _text(browser, f'tr[data-key-id="{key_id}"] [data-field="revoked"]')
        refused = api.get("/v1/operations", headers=mine)
        assert refused.status_code == 401, refused.text


@pytest.fixture
def sandbox() -> Iterator[RunningSandbox]:
    with run_sandbox(api_key=SANDBOX_KEY) as running:
        yield running


def _delivery(ingress: LoneIngress, event_id: str, secret: str) -> httpx.Response:
    """A Stripe delivery of a refund event to the workspace's intake, signed with ``secret``."""
    now = int(time.time())
    body = json.dumps(
        {
            "id": event_id,
            "object": "event",
            "type": "refund.updated",
            "created": now,
            "api_version": "2026-08-26",
            "livemode": False,
            "data": {"object": {"id": f"re_{event_id}", "object": "refund", "status": "pending"}},
        }
    ).encode()
    headers = STRIPE.sign(body=body, secrets=[secret], timestamp=now)
    return httpx.post(
        f"{ingress.url}/v1/events/stripe/{ingress.workspace_id}",
        content=body,
        headers={**headers, "Content-Type": "application/json"},
        timeout=30,
    )


def test_a_rotated_secret_accepts_old_and_new_during_the_overlap_and_the_check_reads(
    browser: webdriver.Chrome, ingress: LoneIngress, sandbox: RunningSandbox
) -> None:
    sign_in(browser, ingress.url, ingress.admin_key)
    browser.get(f"{ingress.url}/console/settings/connections")
    browser.find_element(By.ID, "conn-secrets").send_keys(OLD_SECRET)
    browser.find_element(By.ID, "conn-api-key").send_keys(SANDBOX_KEY)
    browser.find_element(By.ID, "conn-base-url").send_keys(sandbox.base_url)
    _submit(browser, "#set-connection-submit")
    assert _delivery(ingress, "evt_before", OLD_SECRET).status_code == 200

    form = browser.find_element(By.CSS_SELECTOR, "form.rotate")
    form.find_element(By.NAME, "secret").send_keys(NEW_SECRET)
    _submit(browser, "form.rotate button.rotate-submit")
    secrets = _text(browser, '[data-field="secrets"]')
    assert secrets.startswith("#0 current; #1 verifies until"), secrets
    assert OLD_SECRET not in browser.page_source
    assert NEW_SECRET not in browser.page_source

    assert _delivery(ingress, "evt_old_secret", OLD_SECRET).status_code == 200
    assert _delivery(ingress, "evt_new_secret", NEW_SECRET).status_code == 200
    stranger = _delivery(ingress, "evt_stranger", "whsec_nobody_knows")
    assert stranger.status_code == 400, stranger.text

    browser.get(f"{ingress.url}/console/settings/connections")
    assert _text(browser, '#refused [data-field="reason"]') == "no_matching_signature"
    _submit(browser, "button.check-submit")
    problems = _text(browser, "#check-problems")
    assert f"no stripe endpoint delivers to /v1/events/stripe/{ingress.workspace_id}" in problems
    assert "deliveries refused: no_matching_signature" in problems
    screenshot(browser, "console-settings-connections")


def _custom_text() -> str:
    text = EXAMPLE.read_text("utf-8")
    text = text.replace("id: app.entitlement.revoked", "id: acme.entitlement.revoked", 1)
    return text.replace("certification: example", "certification: custom", 1)


def _type(driver: webdriver.Chrome, element_id: str, text: str) -> None:
    """Fills a text box at once (typing a whole contract key by key is slow)."""
    driver.execute_script(
        "document.getElementById(arguments[0]).value = arguments[1];", element_id, text
    )


def test_a_contract_lint_error_is_shown_beside_its_line_and_a_clean_one_is_stored(
    browser: webdriver.Chrome, ingress: LoneIngress
) -> None:
    sign_in(browser, ingress.url, ingress.admin_key)
    browser.get(f"{ingress.url}/console/settings/contracts")
    broken = _custom_text().replace("level: E3", "level: E9", 1)
    line = next(n for n, t in enumerate(broken.splitlines(), 1) if "level: E9" in t)
    _type(browser, "contract-document", broken)
    _submit(browser, "#upload-submit")
    row = browser.find_element(By.CSS_SELECTOR, f'#lint tr[data-line="{line}"]')
    assert "level: E9" in row.text
    error = row.find_element(By.CLASS_NAME, "lint-error").text
    assert "level" in error
    flagged = browser.find_elements(By.CSS_SELECTOR, "#lint tr.has-error")
    assert [r.get_attribute("data-line") for r in flagged] == [str(line)]
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", row)
    screenshot(browser, "console-settings-contracts")

    _type(browser, "contract-document", _custom_text())
    _submit(browser, "#upload-submit")
    assert browser.current_url.endswith(
        "/console/settings/contracts/acme.entitlement.revoked?version=1.0.0"
    )
    assert "| Certification | Custom |" in browser.find_element(By.ID, "contract-page").text
    browser.get(f"{ingress.url}/console/settings/contracts")
    _submit(browser, '#contracts a[href*="acme.entitlement.revoked"]')
    assert "acme.entitlement.revoked" in browser.find_element(By.TAG_NAME, "h1").text
