"""The contract page in a real Chromium: every row of the published seed page's tables is on it.

The expected rows are the data cells (ids, paths, operators, values, timings) of
stripe.refund.succeeded 1.0.0, written here as data from the contract file; prose columns
(meaning, description, reason) are the project's own wording and are only required non-empty.
The hash row is left out: the seed page cites its own file's hash.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from shared.trust.registry import get_registry
from tests.browser.conftest import screenshot
from tests.browser.pages_site import Site, running_site

PAGE = "/verify/stripe/stripe.refund.succeeded/1.0.0"
PROSE = None  # a prose cell: any non-empty text

EXPECTED: dict[tuple[str, ...], list[tuple[str | None, ...]]] = {
    ("Fact", "Value"): [
        ("Contract id", "stripe.refund.succeeded"),
        ("Version", "1.0.0"),
        ("Completion level", "succeeded"),
        ("Certification", "Community"),
        ("Skill", "Stripe 0.1.0"),
        ("Valid for provider API versions", "2026-08-26"),
    ],
    ("Member", "Value"): [
        ("Subject type", "stripe.refund"),
        ("Subject identity", "refund_id = $action.result.id"),
        ("Canonical effect", "money.refund"),
        ("Provider operation", "POST /v1/refunds"),
        ("Idempotency", "idempotency_key through Idempotency-Key, retry is safe"),
    ],
    ("Strategy", "Assurance", "Keys", "Required"): [
        ("resource_id", "strong", "refund_id from $action.result.id", "yes"),
        ("idempotency_key", "strong", "idempotency_key from $operation.id", "no"),
        ("fingerprint", "weak", "charge from $input.charge; amount from $input.amount", "no"),
    ],
    ("Channel", "Level", "Independence", "Verifier", "Description"): [
        ("refund_readback", "E2", "provider readback", "http", PROSE),
        ("refund_succeeded_events", "E3", "provider event", "webhook", PROSE),
        ("refund_created_events", "E3", "provider event", "webhook", PROSE),
    ],
    ("Channel", "Reads", "Typical latency", "Worst case", "Freshness"): [
        ("refund_readback", PROSE, "250 ms", "—", "10000 ms (10 seconds)"),
        ("refund_succeeded_events", PROSE, "4000 ms (4 seconds)", "259200000 ms (3 days)", "—"),
        ("refund_created_events", PROSE, "4000 ms (4 seconds)", "259200000 ms (3 days)", "—"),
    ],
    ("Condition", "Meaning", "Path", "Operator", "Expected", "Evidence"): [
        (
            "refund_status_succeeded",
            PROSE,
            "$observed.refund_readback.status",
            "eq",
            "succeeded",
            "refund_readback",
        ),
        (
            "refund_amount_matches",
            PROSE,
            "$observed.refund_readback.amount",
            "eq",
            "$input.amount",
            "refund_readback",
        ),
        (
            "refund_created_in_window",
            PROSE,
            "$observed.refund_readback.created",
            "time_after",
            "$operation.created_at",
            "refund_readback",
        ),
        (
            "refund_event_succeeded",
            PROSE,
            "$observed.refund_succeeded_events.count",
            "gte",
            "1",
            "refund_succeeded_events",
        ),
    ],
    ("Condition", "Class", "Reason", "Path", "Operator", "Expected"): [
        (
            "refund_on_wrong_charge",
            "wrong subject",
            PROSE,
            "$observed.refund_readback.charge",
            "ne",
            "$input.charge",
        ),
        (
            "refund_amount_mismatch",
            "wrong amount",
            PROSE,
            "$observed.refund_readback.amount",
            "ne",
            "$input.amount",
        ),
        (
            "refund_predates_operation",
            "pre existing state",
            PROSE,
            "$observed.refund_readback.created",
            "time_before",
            "$operation.created_at",
        ),
        (
            "duplicate_refund_present",
            "duplicate side effect",
            PROSE,
            "$observed.refund_created_events.count",
            "gt",
            "1",
        ),
    ],
    ("Rule", "Match", "Verdict", "Reason"): [
        ("terminal_failure", '$observed.refund_readback.status in ["failed"]', "FAILED", PROSE),
        (
            "still_transitional",
            '$observed.refund_readback.status in ["pending","requires_action"]',
            "PENDING",
            PROSE,
        ),
        ("canceled", '$observed.refund_readback.status eq "canceled"', "CONTRADICTED", PROSE),
    ],
    ("Timing member", "Value"): [
        ("Initial delay", "1000 ms"),
        ("Poll interval", "5000 ms"),
        ("Backoff", "exponential factor 2, max 60000 ms"),
        ("Maximum attempts", "40"),
        ("Timeout", "604800000 ms"),
        ("Stale read window", "20000 ms"),
        ("On timeout", "UNVERIFIABLE (evidence_unavailable_before_timeout), escalated to a person"),
    ],
}
SOURCES = [
    "stripe.openapi#/paths/~1v1~1refunds/post",
    "stripe.openapi#/components/schemas/refund/properties/status",
    "stripe.docs.refunds#refunds/p1",
    "stripe.docs.refunds#refunds/refund-status/p3",
    "stripe.openapi#/components/schemas/refund/properties/amount",
    "stripe.openapi#/components/schemas/refund/properties/created",
    "stripe.events#/events/refund.updated",
    "stripe.openapi#/components/schemas/notification_event_data/properties/object",
    "stripe.docs.refunds#refunds/events/p2",
]
READ_NEXT = [
    "/verify/stripe",
    "/verify/stripe/stripe.refund.created",
    "/verify/terms/contracts",
    "/verify/terms/receipts",
]
Row = tuple[str, ...]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("pages")) as running:
        yield running


def _tables(browser: webdriver.Chrome) -> list[tuple[Row, list[Row]]]:
    """Every table as the browser renders it: (header cells, rows of cell texts)."""
    script = """
      return Array.from(document.querySelectorAll("main table")).map((t) => [
        Array.from(t.tHead.rows[0].cells, (c) => c.innerText.trim()),
        Array.from(t.tBodies[0].rows, (r) => Array.from(r.cells, (c) => c.innerText.trim())),
      ]);
    """
    found = browser.execute_script(script)
    return [(tuple(header), [tuple(row) for row in rows]) for header, rows in found]


def _matches(expected: tuple[str | None, ...], shown: Row) -> bool:
    if len(expected) != len(shown):
        return False
    return all(shown[i] if want is PROSE else shown[i] == want for i, want in enumerate(expected))


def test_the_contract_page_shows_every_row_of_the_seed_tables(
    browser: webdriver.Chrome, site: Site
) -> None:
    browser.get(site.url + PAGE)
    assert browser.title == "What does stripe.refund.succeeded prove?"
    tables = _tables(browser)
    missing = []
    for header, rows in EXPECTED.items():
        candidates = [shown for h, shown in tables if h == header]
        assert candidates, f"no table {header}"
        for row in rows:
            if not any(_matches(row, shown) for shown_rows in candidates for shown in shown_rows):
                missing.append((header[0], row))
    assert missing == []
    screenshot(browser, "pages-contract")


def test_the_page_lists_its_sources_questions_versions_and_links(
    browser: webdriver.Chrome, site: Site
) -> None:
    browser.get(site.url + PAGE)
    items = [
        li.text for li in browser.find_elements(By.CSS_SELECTOR, "#sources + ul li, section li")
    ]
    for ref in SOURCES:
        assert any(item.startswith(ref) and "retrieved 2026-09-05" in item for item in items), ref
    questions = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "h3")]
    assert "Can stripe.refund.succeeded be VERIFIED on the action response alone?" in questions
    assert "What does the timeout give?" in questions
    versions = browser.find_element(By.ID, "versions").find_element(By.XPATH, "..").text
    newest = get_registry().versions("stripe.refund.succeeded")[-1]
    assert f"The newest version is {newest}" in versions
    hrefs = [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "a")]
    for path in READ_NEXT:
        assert site.url + path in hrefs, path


def test_the_skill_page_shows_its_completion_levels(browser: webdriver.Chrome, site: Site) -> None:
    browser.get(site.url + "/verify/stripe")
    levels = next(rows for header, rows in _tables(browser) if header[0] == "Level")
    by_level = {row[0]: row for row in levels}
    assert by_level["created"][1] == "stripe.refund.created"
    assert by_level["created"][3] == "no"  # a created Refund object is not moved money
    assert by_level["succeeded"][1] == "stripe.refund.succeeded"
    assert by_level["succeeded"][3] == "yes"
    assert all(row[2] for row in levels)
    text = browser.find_element(By.TAG_NAME, "main").text
    assert "safe_to_claim_complete: false" in text
    assert "/v1/refunds/{id}" in text
    screenshot(browser, "pages-skill")
