"""Events stamped in the same second: ``latest``/``earliest`` never choose among them.

Provider timestamps have one-second resolution, so which of two events of one second came
last is not knowable from them. Where tied events disagree on a field, the reduction reads it
as unknown (``{"$unknown": "tied"}``), and a decision over them is the same for every order of
delivery and for every choice of event ids.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.core.context import build_context
from shared.core.contract import Contract
from shared.core.engine import decide
from shared.core.events import reduce_events
from shared.core.expressions import UNKNOWN, compile_expression
from shared.core.types import EventRecord, Observation, ObservationStatus, OperationFacts, Verdict
from tests.unit.core.builders import T0, event, facts, load

ROOT = Path(__file__).resolve().parents[3]
C = load()
SUCCEEDED = C.channel("refund_succeeded_events")
CONTEXT = build_context(C, facts())
SECOND = T0.replace(microsecond=0) + timedelta(seconds=3)


def reduce(events: list[EventRecord]) -> dict[str, Any]:
    return reduce_events(
        SUCCEEDED,
        events,
        context=CONTEXT,
        operation_created_at=T0,
        api_versions=C.provider_api_versions,
    )


def read(value: dict[str, Any], path: str) -> Any:
    context = build_context(C, facts())
    context.observed = {"refund_succeeded_events": value}
    return compile_expression(f"$observed.refund_succeeded_events.{path}").resolve(context)


def test_tied_events_that_agree_keep_the_value() -> None:
    records = [event("evt_a", at=SECOND), event("evt_b", at=SECOND + timedelta(milliseconds=5))]
    result = reduce(records)
    assert read(result, "latest.data.object.status") == "succeeded"
    assert read(result, "latest.data.object.charge") == "ch_1"
    assert read(result, "latest.id") is UNKNOWN  # the event ids differ


def test_tied_events_that_disagree_are_unknown_in_latest_and_earliest() -> None:
    records = [
        event("evt_a", at=SECOND, amount=2000),
        event("evt_b", at=SECOND, amount=4000, extra="only here"),
    ]
    for arrival in itertools.permutations(records):
        result = reduce(list(arrival))
        for end in ("latest", "earliest"):
            assert read(result, f"{end}.data.object.amount") is UNKNOWN
            assert read(result, f"{end}.data.object.extra") is UNKNOWN  # absent in one
            assert read(result, f"{end}.data.object.extra.deeper") is UNKNOWN
            assert read(result, f"{end}.data.object.status") == "succeeded"


def test_a_later_second_decides_latest_alone() -> None:
    records = [
        event("evt_a", at=SECOND, amount=2000),
        event("evt_b", at=SECOND, amount=4000),
        event("evt_c", at=SECOND + timedelta(seconds=1), amount=6000),
    ]
    result = reduce(records)
    assert read(result, "latest.data.object.amount") == 6000
    assert read(result, "earliest.data.object.amount") is UNKNOWN
    assert result["latest"] is records[2].body


def test_the_mark_is_unknown_only_inside_observations() -> None:
    mark = {"$unknown": "tied"}
    context = build_context(C, facts(input={"charge": "ch_1", "amount": mark}))
    assert compile_expression("$input.amount").resolve(context) == mark


# --- decisions over tied events: app.entitlement.revoked, two refunds of 2000 in one second


@cache
def entitlement_contract() -> Contract:
    path = ROOT / "contracts" / "examples" / "app.entitlement.revoked.yaml"
    return Contract.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))


def entitlement_facts() -> OperationFacts:
    return OperationFacts(
        id="op_1",
        created_at=T0,
        input={"charge": "ch_1", "amount_refunded": 4000, "expected_seats": 1},
        action_result={"id": "re_2", "object": "refund", "status": "succeeded"},
        action_reported_at=T0 + timedelta(milliseconds=300),
    )


def charge_refunded(event_id: str, total: int, *, at: datetime) -> EventRecord:
    return EventRecord(
        event_id=event_id,
        type="charge.refunded",
        provider_timestamp=at,
        body={
            "id": event_id,
            "type": "charge.refunded",
            "created": int(at.timestamp()),
            "api_version": "2026-08-26",
            "data": {"object": {"id": "ch_1", "object": "charge", "amount_refunded": total}},
        },
        api_version="2026-08-26",
    )


def entitlement_decision(events: list[EventRecord], seats: int) -> tuple[Verdict, str]:
    contract = entitlement_contract()
    op = entitlement_facts()
    now = T0 + timedelta(seconds=30)
    spec = contract.channel("charge_refunded_events")
    assert spec is not None
    value = reduce_events(
        spec,
        events,
        context=build_context(contract, op),
        operation_created_at=op.created_at,
        api_versions=contract.provider_api_versions,
    )
    observations = [
        Observation(
            "charge_refunded_events", now - timedelta(seconds=1), ObservationStatus.OK, value
        ),
        Observation(
            "entitlement_readback",
            now - timedelta(seconds=1),
            ObservationStatus.OK,
            {"charge": "ch_1", "seats": seats},
        ),
    ]
    decision = decide(contract, op, observations, now)
    return decision.verdict, decision.reason


def test_two_refunds_in_one_second_never_contradict_the_declared_total() -> None:
    """Seen before: the event id chose the 2000 event as latest, CONTRADICTED
    ``refund_total_below_declared`` though Stripe's total was 4000."""
    at = SECOND
    first = charge_refunded("evt_b", 2000, at=at)
    second = charge_refunded("evt_a", 4000, at=at + timedelta(milliseconds=1))
    for arrival in itertools.permutations([first, second]):
        verdict, reason = entitlement_decision(list(arrival), seats=1)
        assert (verdict, reason) != (Verdict.CONTRADICTED, "refund_total_below_declared")
        assert verdict is Verdict.PENDING


@settings(max_examples=200, deadline=None)
@given(
    totals=st.lists(st.sampled_from([1000, 2000, 3000, 4000]), min_size=1, max_size=4),
    ids=st.lists(st.text("abcdef", min_size=1, max_size=4), min_size=4, max_size=4, unique=True),
    later=st.one_of(st.none(), st.sampled_from([2000, 4000])),
    seats=st.sampled_from([0, 1, 3]),
)
def test_the_decision_is_the_same_for_every_order_and_every_id(
    totals: list[int], ids: list[str], later: int | None, seats: int
) -> None:
    tied = [
        charge_refunded(f"evt_{ids[i]}", total, at=SECOND + timedelta(milliseconds=i))
        for i, total in enumerate(totals)
    ]
    events = list(tied)
    if later is not None:
        events.append(charge_refunded("evt_later", later, at=SECOND + timedelta(seconds=2)))
    decisions = {
        entitlement_decision(list(order), seats) for order in itertools.permutations(events)
    }
    assert len(decisions) == 1
    ((verdict, reason),) = decisions
    if later is None and len(set(totals)) > 1:
        # the tied totals disagree: neither the total nor its shortfall is known
        assert reason != "refund_total_below_declared"
        assert verdict is not Verdict.VERIFIED
    # the same events under other ids decide the same
    renamed = [
        charge_refunded(
            f"evt_z{i}", e.body["data"]["object"]["amount_refunded"], at=e.provider_timestamp
        )
        for i, e in enumerate(reversed(events))
    ]
    assert entitlement_decision(renamed, seats) == (verdict, reason)
