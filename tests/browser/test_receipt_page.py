"""``/verify/receipt`` checks receipts in a real Chromium: WebCrypto Ed25519 over the canonical
JSON, no server-side check (the keys are pasted, or fetched from the same ingress)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.conftest import screenshot
from tests.browser.pages_site import (
    Site,
    fragment,
    receipt_pair,
    retired_key_receipt,
    running_site,
    v1_receipt,
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("pages")) as running:
        yield running


def _check(
    browser: webdriver.Chrome, site: Site, receipt: Any, *, keys: Any = None
) -> tuple[str, str]:
    """Opens the page, pastes ``receipt`` (and ``keys``), presses Check: (outcome, text)."""
    browser.get(site.url + "/verify/receipt")
    browser.find_element(By.ID, "receipt").send_keys(json.dumps(receipt))
    if keys is not None:
        browser.find_element(By.ID, "keys").send_keys(json.dumps(keys))
    browser.find_element(By.ID, "check").click()
    return _outcome(browser)


def _shot(browser: webdriver.Chrome, name: str) -> None:
    """A screenshot for the docs with the result in view."""
    browser.execute_script("document.getElementById('keys').scrollIntoView()")
    screenshot(browser, name)


def _outcome(browser: webdriver.Chrome) -> tuple[str, str]:
    result = browser.find_element(By.ID, "result")
    WebDriverWait(browser, 20).until(
        lambda _: result.get_attribute("data-outcome") in ("verified", "refused")
    )
    return str(result.get_attribute("data-outcome")), result.text


def test_a_genuine_v2_receipt_verifies_offline_with_pasted_keys(
    browser: webdriver.Chrome, site: Site
) -> None:
    current, _ = receipt_pair()
    outcome, text = _check(browser, site, current, keys=site.keys)
    assert outcome == "verified", text
    assert current["receipt"]["id"] in text
    assert "version 2" in text
    assert "(active)" in text
    _shot(browser, "pages-receipt-verified")


def test_a_genuine_v1_receipt_verifies(browser: webdriver.Chrome, site: Site) -> None:
    document = v1_receipt()
    outcome, text = _check(browser, site, document, keys=site.keys)
    assert outcome == "verified", text
    assert "version 1" in text


def test_a_receipt_signed_by_a_retired_key_verifies_with_this_servers_keys(
    browser: webdriver.Chrome, site: Site
) -> None:
    assert [k["status"] for k in site.keys["keys"]] == ["active", "retired"]
    document = retired_key_receipt()
    outcome, text = _check(browser, site, document)  # no pasted keys: fetched same-origin
    assert outcome == "verified", text
    assert f"key {document['key_id']} (retired" in text


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: d["receipt"].update(verdict="FAILED"), "tampered"),
        (lambda d: d["receipt"]["conditions"][1].update(observed=1501), "tampered"),
        (lambda d: d.update(signature=d["signature"][:-2] + "AA"), "tampered"),
        (lambda d: d["receipt"].update(version=1), "tampered"),
        (lambda d: d.update(key_id="0123456789abcdef"), "unknown key 0123456789abcdef"),
    ],
    ids=["verdict", "observed-value", "signature", "version-relabelled", "key-id"],
)
def test_a_tampered_receipt_is_refused_with_the_reason(
    browser: webdriver.Chrome, site: Site, change: Any, reason: str
) -> None:
    document = copy.deepcopy(receipt_pair()[0])
    change(document)
    outcome, text = _check(browser, site, document, keys=site.keys)
    assert outcome == "refused", text
    assert reason in text
    if document["receipt"]["verdict"] == "FAILED":
        _shot(browser, "pages-receipt-refused")


def test_a_repeated_key_is_refused(browser: webdriver.Chrome, site: Site) -> None:
    text = json.dumps(receipt_pair()[0])
    doubled = text.replace('"receipt": {', '"receipt": {"verdict": "FAILED", ', 1)
    browser.get(site.url + "/verify/receipt")
    browser.find_element(By.ID, "receipt").send_keys(doubled)
    browser.find_element(By.ID, "keys").send_keys(json.dumps(site.keys))
    browser.find_element(By.ID, "check").click()
    outcome, shown = _outcome(browser)
    assert outcome == "refused"
    assert 'duplicate key "verdict"' in shown


def test_a_superseded_receipt_shows_what_superseded_it(
    browser: webdriver.Chrome, site: Site
) -> None:
    first, later = receipt_pair()
    outcome, text = _check(browser, site, [first, later], keys=site.keys)
    assert outcome == "verified", text
    old, new = first["receipt"]["id"], later["receipt"]["id"]
    assert f"the current one is {new}" in text
    chain = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#chain li")]
    assert len(chain) == 2
    assert f"superseded by {new} (CONTRADICTED)" in chain[0]
    assert f"it supersedes {old}" in chain[1]
    _shot(browser, "pages-receipt-superseded")


def test_the_newer_receipt_alone_names_what_it_supersedes(
    browser: webdriver.Chrome, site: Site
) -> None:
    later = receipt_pair()[1]
    outcome, text = _check(browser, site, later, keys=site.keys)
    assert outcome == "verified", text
    assert f"it supersedes {later['receipt']['supersedes']}" in text


def test_a_fragment_prefills_the_receipt_and_checks_at_once(
    browser: webdriver.Chrome, site: Site
) -> None:
    document = receipt_pair()[0]
    browser.get(site.url + "/verify/receipt" + fragment(document))
    outcome, text = _outcome(browser)
    assert outcome == "verified", text
    assert json.loads(browser.find_element(By.ID, "receipt").get_attribute("value") or "") == (
        document
    )


def test_the_page_says_how_without_javascript(site: Site) -> None:
    page = site.get("/verify/receipt")
    assert page.status_code == 200
    assert "<noscript>" in page.text
    assert "provely receipts verify" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "<script>" not in page.text  # no inline script
