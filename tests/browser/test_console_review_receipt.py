"""A person resolves a HUMAN_REVIEW in the console with a note, and the review's signed receipt
verifies on ``/verify/receipt`` (the published page: ``<textarea id="receipt">``,
``<button id="check">``, ``<output id="result" data-outcome="verified|refused">``; opened with
``#receipt=<base64url of the document>`` it fills itself in and checks)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait

from shared.core.types import OperationState
from shared.db.models import Operation
from shared.db.session import session_scope
from shared.lifecycle.operations import change_state
from tests.browser.conftest import screenshot
from tests.browser.console_system import LoneIngress, lone_ingress, sign_in


@pytest.fixture
def ingress(tmp_path: Path) -> Iterator[LoneIngress]:
    with lone_ingress(tmp_path) as running:
        yield running


def _in_human_review(ingress: LoneIngress) -> str:
    headers = {"Authorization": f"Bearer {ingress.admin_key}"}
    with httpx.Client(base_url=ingress.url, headers=headers, timeout=30) as api:
        created = api.post(
            "/v1/operations",
            json={
                "contract": "stripe.refund.succeeded",
                "input": {"charge": "ch_review", "amount": 2000, "currency": "usd"},
            },
        )
        assert created.status_code == 201, created.text
        op_id = str(created.json()["id"])
        reported = api.post(
            f"/v1/operations/{op_id}/action",
            json={"phase": "result", "result": {"id": "re_review"}, "http_status": 200},
        )
        assert reported.status_code == 200, reported.text
    with session_scope(ingress.engine) as session:
        op = session.get(Operation, op_id)
        assert op is not None
        change_state(
            session,
            op,
            to_state=OperationState.HUMAN_REVIEW,
            verdict="UNVERIFIABLE",
            reason="evidence_unavailable_before_timeout",
            verdict_class=None,
            final=True,
            decision={"verdict": "UNVERIFIABLE", "conditions": [], "evidence": []},
            cause="deadline",
            now=datetime.now(UTC),
            settings=ingress.settings,
            receipt=True,
        )
    return op_id


def test_a_review_with_a_note_is_a_receipt_that_verifies_in_the_browser(
    browser: webdriver.Chrome, ingress: LoneIngress
) -> None:
    op_id = _in_human_review(ingress)
    sign_in(browser, ingress.url, ingress.admin_key)
    browser.get(f"{ingress.url}/console/review")
    browser.find_element(By.LINK_TEXT, op_id).click()
    browser.find_element(By.ID, "review-verdict").send_keys("VERIFIED")
    browser.find_element(By.ID, "review-note").send_keys("Refund seen in the Stripe dashboard.")
    screenshot(browser, "console-review")
    browser.find_element(By.ID, "review-submit").click()
    review = WebDriverWait(browser, 30).until(seen.presence_of_element_located((By.ID, "review")))
    assert "Refund seen in the Stripe dashboard." in review.text
    rows = browser.find_elements(By.CSS_SELECTOR, "#receipts tbody tr")
    assert len(rows) == 2  # the review's receipt, then the one it follows
    assert "review" in rows[0].text
    assert "human_review_resolved" in rows[0].text
    followed = rows[1].get_attribute("data-receipt-id")
    assert followed
    assert followed in rows[0].text
    link = rows[0].find_element(By.CLASS_NAME, "check").get_attribute("href")
    assert link
    assert "/verify/receipt#receipt=" in link
    browser.get(link)
    result = WebDriverWait(browser, 30).until(
        lambda driver: driver.find_element(By.ID, "result").get_attribute("data-outcome")
    )
    assert result == "verified"
    assert browser.find_element(By.ID, "receipt").get_attribute("value")
