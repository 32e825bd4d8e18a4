"""1.2.0 of the Stripe contracts (#30): failure and cancellation events are evidence, and a
readback that goes backwards decides nothing.

- the contracts: 1.2.0 keeps every row of 1.1.0 and adds the failure events' channel, the
  rule that holds a decision back (and supersedes a VERIFIED), and the readbacks' monotone
  rules; every new row is on the rendered page;
- the engine: World A's readings (a stored ``refund.failed`` newer than the success event, a
  lagging readback still saying ``succeeded``) give PENDING, never VERIFIED; an inconsistent
  reading is unknown (PENDING ``inconsistent_reading``);
- ``shared.core.consistency``: what goes backwards, rule by rule;
- lint: the new fields' checks.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.core.consistency import ITEM_LOST, NOT_FOUND_AFTER_FOUND, STAGE_WENT_BACK, backwards
from shared.core.contract import Channel, Contract
from shared.core.engine import decide
from shared.core.lint.contract import lint_contract
from shared.core.render import render_page
from shared.core.types import Observation, ObservationStatus, OperationFacts
from tests.unit.contracts.helpers import (
    CREATED_1_1,
    CREATED_1_2,
    SUCCEEDED_1_1,
    SUCCEEDED_1_2,
    contract_data,
)

T0 = datetime(2026, 12, 1, 12, 0, 0, 250_000, tzinfo=UTC)
NOW = T0 + timedelta(seconds=6)
CREATED_S = int(T0.timestamp()) + 1
OK = ObservationStatus.OK


def _contract(path: Any) -> Contract:
    return Contract.model_validate(contract_data(path))


def _facts() -> OperationFacts:
    return OperationFacts(
        id="op_1",
        created_at=T0,
        input={"charge": "ch_1", "amount": 2000, "currency": "usd"},
        action_result={"id": "re_ours", "status": "pending"},
        action_reported_at=T0 + timedelta(seconds=1),
        action_phase="result",
        deadline=T0 + timedelta(days=7),
    )


def _refund(status: str = "succeeded") -> dict[str, Any]:
    return {
        "id": "re_ours",
        "object": "refund",
        "charge": "ch_1",
        "amount": 2000,
        "currency": "usd",
        "status": status,
        "created": CREATED_S,
    }


def _event(kind: str, status: str, created: int) -> dict[str, Any]:
    return {"id": f"evt_{kind}_{status}_{created}", "type": kind, "created": created,
            "data": {"object": {**_refund(status)}}}  # fmt: skip


def _reduction(*events: dict[str, Any]) -> dict[str, Any]:
    ordered = sorted(events, key=lambda e: e["created"])
    return {
        "events": ordered,
        "count": len(ordered),
        "latest": ordered[-1] if ordered else None,
        "earliest": ordered[0] if ordered else None,
        "types": sorted({e["type"] for e in ordered}),
        "duplicates_dropped": 0,
    }


def _readings(
    *,
    readback: Observation | None = None,
    succeeded_at: int | None = CREATED_S,
    failed_at: int | None = None,
    failure_type: str = "refund.failed",
    failure_status: str = "failed",
) -> list[Observation]:
    succeeded = [_event("refund.updated", "succeeded", succeeded_at)] if succeeded_at else []
    failures = [_event(failure_type, failure_status, failed_at)] if failed_at else []
    listing = {"object": "list", "data": [_refund()], "has_more": False, "count": 1}
    return [
        readback or Observation("refund_readback", NOW, OK, _refund()),
        Observation("charge_refunds", NOW, OK, listing),
        Observation(
            "refund_created_events", NOW, OK, _reduction(_event("refund.created", "pending", 1))
        ),
        Observation("other_refund_created_events", NOW, OK, _reduction()),
        Observation("refund_succeeded_events", NOW, OK, _reduction(*succeeded)),
        Observation("refund_failure_events", NOW, OK, _reduction(*failures)),
    ]


def _outcome(path: Any, observations: list[Observation]) -> tuple[str, str, bool, bool]:
    decision = decide(_contract(path), _facts(), observations, NOW)
    return decision.verdict.value, decision.reason, decision.final, decision.supersedes


# --------------------------------------------------------------------------- the contracts


@pytest.mark.parametrize(
    ("old", "new"), [(SUCCEEDED_1_1, SUCCEEDED_1_2), (CREATED_1_1, CREATED_1_2)]
)
def test_1_2_0_keeps_every_row_of_1_1_0_and_adds_the_failure_evidence(old: Any, new: Any) -> None:
    before, after = _contract(old).document(), _contract(new).document()
    assert after["version"] == "1.2.0"
    for section in ("completion", "negative", "verdict_map", "sources"):
        for row in before[section]:
            assert row in after[section], f"{section}: {row} is missing from 1.2.0"
    names = [c["name"] for c in after["channels"]]
    assert names[: len(before["channels"])] == [c["name"] for c in before["channels"]]
    assert "refund_failure_events" in names
    rule = [r for r in after["verdict_map"] if r.get("supersedes_verified")]
    assert len(rule) == 1
    assert rule[0]["verdict"] == "PENDING"
    assert lint_contract(_contract(new), file=str(new)) == []


def test_1_1_0_serialises_without_the_new_fields() -> None:
    # A contract that uses neither field keeps its canonical JSON (and hash) unchanged.
    doc = _contract(SUCCEEDED_1_1).document()
    assert all("monotone" not in c for c in doc["channels"])
    assert all("supersedes_verified" not in r for r in doc["verdict_map"])


@pytest.mark.parametrize("path", [SUCCEEDED_1_2, CREATED_1_2], ids=["succeeded", "created"])
def test_every_new_row_is_on_the_page(path: Any) -> None:
    contract = _contract(path)
    page = render_page(contract)
    failure = contract.channel("refund_failure_events")
    assert failure is not None
    assert failure.webhook is not None
    assert "`refund_failure_events`" in page
    assert " ".join(failure.description.split()) in page
    assert "events `refund.failed`, `refund.updated`" in page
    assert '`$event.data.object.status` in `["failed","canceled"]`' in page
    assert "## Readings that go backwards" in page
    assert "| `refund_readback` | once read, a not-found answer goes backwards |" in page
    assert (
        "| `refund_readback` | `status` only moves forward: `pending` / `requires_action` → "
        "`succeeded` → `failed` / `canceled` |"
    ) in page
    assert "| `charge_refunds` | an item once listed (by id) stays listed |" in page
    for rule in contract.verdict_map:
        if rule.supersedes_verified:
            assert f"| `{rule.id}` |" in page
            assert "PENDING; after VERIFIED it supersedes the receipt" in page
            assert " ".join(rule.reason.split()) in page


def test_the_1_1_0_page_has_no_backwards_section() -> None:
    assert "Readings that go backwards" not in render_page(_contract(SUCCEEDED_1_1))


# --------------------------------------------------------------------------- decisions


def test_world_a_a_stored_failure_newer_than_the_success_event_never_verifies() -> None:
    # The readback lags and still says succeeded; refund.failed (2 s after the success event)
    # is stored. 1.1.0 verified on exactly these readings.
    readings = _readings(succeeded_at=CREATED_S, failed_at=CREATED_S + 2)
    old = [o for o in readings if o.channel != "refund_failure_events"]
    assert _outcome(SUCCEEDED_1_1, old)[:2] == ("VERIFIED", "all_conditions_hold")
    assert _outcome(SUCCEEDED_1_2, readings) == (
        "PENDING",
        "failure_event_after_success",
        False,
        True,
    )


@pytest.mark.parametrize(
    ("kind", "status"),
    [("refund.failed", "failed"), ("refund.updated", "failed"), ("refund.updated", "canceled")],
)
def test_each_failure_event_holds_the_decision_back(kind: str, status: str) -> None:
    readings = _readings(failed_at=CREATED_S + 1, failure_type=kind, failure_status=status)
    assert _outcome(SUCCEEDED_1_2, readings)[:2] == ("PENDING", "failure_event_after_success")


def test_a_failure_event_in_the_same_second_as_the_success_event_holds_it_back() -> None:
    # Provider times have one-second resolution: a tie is no proof of order.
    readings = _readings(succeeded_at=CREATED_S + 1, failed_at=CREATED_S + 1)
    assert _outcome(SUCCEEDED_1_2, readings)[:2] == ("PENDING", "failure_event_after_success")


def test_a_failure_event_older_than_the_newest_success_event_does_not_hold_it_back() -> None:
    readings = _readings(succeeded_at=CREATED_S + 3, failed_at=CREATED_S + 1)
    assert _outcome(SUCCEEDED_1_2, readings)[:2] == ("VERIFIED", "all_conditions_hold")


def test_when_the_readback_agrees_the_verdict_map_decides() -> None:
    failed = Observation("refund_readback", NOW, OK, _refund("failed"))
    readings = _readings(readback=failed, failed_at=CREATED_S + 2)
    assert _outcome(SUCCEEDED_1_2, readings) == ("FAILED", "terminal_failure", True, False)
    canceled = Observation("refund_readback", NOW, OK, _refund("canceled"))
    readings = _readings(readback=canceled, failed_at=CREATED_S + 2, failure_status="canceled")
    assert _outcome(SUCCEEDED_1_2, readings)[:3] == ("CONTRADICTED", "canceled", True)


def test_created_1_2_0_any_failure_event_of_the_refund_holds_it_back() -> None:
    readings = [o for o in _readings(failed_at=CREATED_S) if o.channel != "refund_succeeded_events"]
    assert _outcome(CREATED_1_2, readings) == ("PENDING", "failure_event_for_refund", False, True)
    clean = [o for o in _readings() if o.channel != "refund_succeeded_events"]
    assert _outcome(CREATED_1_2, clean)[:2] == ("VERIFIED", "all_conditions_hold")


def test_the_superseding_decision_names_only_the_failure_channel_as_used() -> None:
    decision = decide(_contract(SUCCEEDED_1_2), _facts(), _readings(failed_at=CREATED_S + 2), NOW)
    used = {e.channel for e in decision.evidence if e.used}
    assert used == {"refund_failure_events"}


@pytest.mark.parametrize("channel", ["refund_readback", "charge_refunds"])
def test_an_inconsistent_reading_is_unknown_and_never_verifies(channel: str) -> None:
    readings = [
        o if o.channel != channel else Observation(channel, NOW, ObservationStatus.INCONSISTENT)
        for o in _readings()
    ]
    assert _outcome(SUCCEEDED_1_2, readings) == ("PENDING", "inconsistent_reading", False, False)
    decision = decide(_contract(SUCCEEDED_1_2), _facts(), readings, NOW)
    assert any(c.note == "inconsistent_reading" for c in decision.conditions)


def test_an_inconsistent_reading_past_the_deadline_goes_to_a_person() -> None:
    readings = [
        o
        if o.channel != "refund_readback"
        else Observation("refund_readback", NOW, ObservationStatus.INCONSISTENT)
        for o in _readings()
    ]
    decision = decide(_contract(SUCCEEDED_1_2), _facts(), readings, T0 + timedelta(days=8))
    assert (decision.verdict.value, decision.final, decision.escalate) == (
        "UNVERIFIABLE",
        True,
        True,
    )


# --------------------------------------------------------------------------- consistency


def _channel(name: str) -> Channel:
    found = _contract(SUCCEEDED_1_2).channel(name)
    assert found is not None
    return found


def _list(*ids: str) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": i} for i in ids], "count": len(ids)}


@pytest.mark.parametrize(
    ("channel", "earlier", "status", "value", "expected"),
    [
        ("refund_readback", [], "not_found", None, None),  # never read: not backwards
        ("refund_readback", [_refund()], "not_found", None, NOT_FOUND_AFTER_FOUND),
        ("refund_readback", [_refund()], "unavailable", None, None),
        ("refund_readback", [_refund("pending")], "ok", _refund("succeeded"), None),
        ("refund_readback", [_refund("succeeded")], "ok", _refund("failed"), None),
        ("refund_readback", [_refund("succeeded")], "ok", _refund("pending"), STAGE_WENT_BACK),
        ("refund_readback", [_refund("failed")], "ok", _refund("succeeded"), STAGE_WENT_BACK),
        ("refund_readback", [_refund("failed")], "ok", _refund("canceled"), None),  # one stage
        ("refund_readback", [_refund("succeeded")], "ok", _refund("weird"), None),  # unknown
        ("refund_readback", [_refund("weird")], "ok", _refund("pending"), None),
        ("refund_readback", [{"status": 3}], "ok", _refund("pending"), None),
        ("refund_readback", [_refund()], "ok", "not an object", None),
        (
            "refund_readback",
            [_refund("pending"), _refund()],
            "ok",
            _refund("pending"),
            STAGE_WENT_BACK,
        ),
        ("charge_refunds", [_list("re_1")], "ok", _list("re_1", "re_2"), None),
        ("charge_refunds", [_list("re_1")], "ok", _list(), ITEM_LOST),
        ("charge_refunds", [_list(), _list("re_1")], "ok", _list("re_2"), ITEM_LOST),
        ("charge_refunds", [_list("re_1")], "ok", {"data": "x"}, None),
        ("charge_refunds", [{"data": [1, {"id": 2}]}], "ok", _list(), None),
        ("charge_refunds", [_list("re_1")], "not_found", None, None),  # exists not declared
        ("refund_succeeded_events", [{"count": 1}], "ok", {"count": 0}, None),  # no rule
    ],
)
def test_what_goes_backwards(
    channel: str, earlier: list[Any], status: str, value: Any, expected: str | None
) -> None:
    assert backwards(_channel(channel), earlier=earlier, status=status, value=value) == expected


# --------------------------------------------------------------------------- lint


def _lint(edit: Any) -> list[str]:
    data = contract_data(SUCCEEDED_1_2)
    edit(data)
    return [
        f"{e.field}: {e.message}" for e in lint_contract(Contract.model_validate(data), file="x")
    ]


def _channel_data(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in data["channels"] if c["name"] == name)


def _rule_data(data: dict[str, Any]) -> dict[str, Any]:
    return next(r for r in data["verdict_map"] if r.get("supersedes_verified"))


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda d: _channel_data(d, "refund_succeeded_events").update(monotone={"exists": True}),
            "only a readback can go backwards",
        ),
        (
            lambda d: _channel_data(d, "refund_readback").update(monotone={}),
            "declare exists, keeps_items or stages",
        ),
        (
            lambda d: _channel_data(d, "refund_readback").update(monotone={"keeps_items": True}),
            "only a paged list readback",
        ),
        (
            lambda d: _channel_data(d, "refund_readback").update(
                monotone={"stages": {"field": "a..b", "order": [["x"], ["y"]]}}
            ),
            "a dotted field of the reading",
        ),
        (
            lambda d: _channel_data(d, "refund_readback").update(
                monotone={"stages": {"field": "status", "order": [["x"], []]}}
            ),
            "a stage lists at least one value",
        ),
        (
            lambda d: _channel_data(d, "refund_readback").update(
                monotone={"stages": {"field": "status", "order": [["x"], ["x"]]}}
            ),
            "x is in two stages",
        ),
        (lambda d: _rule_data(d).update(verdict="FAILED"), "is final and supersedes"),
        (
            lambda d: _rule_data(d).update(path="$observed.refund_readback.created"),
            "only a rule whose path reads a webhook channel",
        ),
        (
            lambda d: d["verdict_map"][0].update(id="inconsistent_reading"),
            "a reason the runtime gives itself",
        ),
    ],
)
def test_lint_of_the_new_fields(edit: Any, expected: str) -> None:
    problems = _lint(edit)
    assert any(expected in p for p in problems), problems
