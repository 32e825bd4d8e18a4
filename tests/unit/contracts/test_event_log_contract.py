"""stripe.refund.succeeded 1.3.0: 1.2.0 and a channel reading Stripe's event log, and the lint
rules of an ``event_log`` channel (its verifier's level and parameter block)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.core.contract import Contract
from shared.core.lint.document import lint_document
from shared.core.render import render_page
from tests.unit.contracts.helpers import SUCCEEDED_1_2, SUCCEEDED_1_3, contract_data


def _log_channel(doc: dict[str, Any]) -> dict[str, Any]:
    return next(ch for ch in doc["channels"] if ch["name"] == "refund_event_log")


def test_1_3_0_keeps_every_row_of_1_2_0_and_adds_the_event_log() -> None:
    before = Contract.model_validate(contract_data(SUCCEEDED_1_2)).document()
    after = Contract.model_validate(contract_data(SUCCEEDED_1_3)).document()
    assert after["version"] == "1.3.0"
    for section in ("completion", "negative", "verdict_map", "sources", "channels"):
        for row in before[section]:
            assert row in after[section], f"{section}: {row} is missing from 1.3.0"
    added = [ch for ch in after["channels"] if ch not in before["channels"]]
    assert [(ch["name"], ch["verifier"], ch["level"]) for ch in added] == [
        ("refund_event_log", "event_log", "E3")
    ]
    assert added[0]["event_log"] == {
        "path": "/v1/events",
        "event_types": ["refund.created", "refund.updated", "refund.failed"],
        "max_pages": 10,
    }
    # Every event type a webhook channel of 1.3.0 reads is asked of the log.
    read = {
        t for ch in after["channels"] if ch.get("webhook") for t in ch["webhook"]["event_types"]
    }
    assert read <= set(added[0]["event_log"]["event_types"])
    assert before["rejection"] == after["rejection"]
    assert lint_document(contract_data(SUCCEEDED_1_3), file="x.yaml") == []


def test_the_page_shows_the_event_log_rows() -> None:
    page = render_page(Contract.model_validate(contract_data(SUCCEEDED_1_3)))
    assert "| `refund_event_log` | E3 | provider event | `event_log` |" in page
    assert "| `refund_event_log` | `GET /v1/events`, events `refund.created`" in page


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"level": "E2"}, "level", "an event_log channel observes at E3, not E2"),
        ({"event_log": None}, "event_log", "an event_log channel needs its event_log parameters"),
        ({"http": {"path": "/v1/events"}}, "http", "takes no http parameters"),
        ({"monotone": {"exists": True}}, "monotone", "only a readback can go backwards"),
        (
            {"event_log": {"path": "/v1/events", "event_types": ["refund.updated"] * 2}},
            "event_log.event_types",
            "refund.updated is listed twice",
        ),
    ],
)
def test_an_event_log_channel_is_linted_by_its_verifier(
    change: dict[str, Any], field: str, words: str
) -> None:
    doc = contract_data(SUCCEEDED_1_3)
    channel = _log_channel(doc)
    index = doc["channels"].index(channel)
    channel.update(change)
    errors = lint_document(doc, file="x.yaml")
    assert any(e.field == f"channels[{index}].{field}" and words in e.message for e in errors), [
        str(e) for e in errors
    ]


def test_a_channel_naming_an_unknown_verifier_is_refused() -> None:
    doc = contract_data(SUCCEEDED_1_3)
    _log_channel(doc)["verifier"] = "carrier_pigeon"
    errors = lint_document(doc, file="x.yaml")
    assert any("no verifier is named 'carrier_pigeon'" in e.message for e in errors), [
        str(e) for e in errors
    ]
