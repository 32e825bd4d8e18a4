"""Hypothesis properties of ``stripe.refund.succeeded`` 1.2.0 (#30) over generated readings.

- never VERIFIED while a stored failure or cancellation event of the refund is no older (in
  provider time) than its newest success event;
- never VERIFIED while the latest reading of a readback is inconsistent (it went backwards);
- a decision held back by a failure event is not final, and is marked to supersede a VERIFIED.

The oracles are written from the contract page, not from the engine.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.core.contract import Contract
from shared.core.engine import decide
from shared.core.types import Observation, ObservationStatus, OperationFacts, Verdict
from tests.unit.contracts.helpers import SUCCEEDED_1_2, contract_data

C = Contract.model_validate(contract_data(SUCCEEDED_1_2))
T0 = datetime(2026, 12, 1, 12, 0, 0, 250_000, tzinfo=UTC)
BASE = int(T0.timestamp()) + 1
NOW = T0 + timedelta(seconds=30)
FACTS = OperationFacts(
    id="op_1",
    created_at=T0,
    input={"charge": "ch_1", "amount": 2000, "currency": "usd"},
    action_result={"id": "re_1", "status": "pending"},
    action_reported_at=T0 + timedelta(seconds=1),
    action_phase="result",
    deadline=T0 + timedelta(days=7),
)
STATUSES = ["succeeded", "succeeded", "succeeded", "pending", "failed", "canceled"]


def _refund(status: str) -> dict[str, Any]:
    return {"id": "re_1", "object": "refund", "charge": "ch_1", "amount": 2000,
            "currency": "usd", "status": status, "created": BASE}  # fmt: skip


def _reduction(events: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(events, key=lambda e: (e["created"], e["id"]))
    return {
        "events": ordered,
        "count": len(ordered),
        "latest": ordered[-1] if ordered else None,
        "earliest": ordered[0] if ordered else None,
        "types": sorted({e["type"] for e in ordered}),
        "duplicates_dropped": 0,
    }


def _event(i: int, kind: str, status: str, created: int) -> dict[str, Any]:
    return {"id": f"evt_{i}", "type": kind, "created": created,
            "data": {"object": _refund(status)}}  # fmt: skip


offsets = st.integers(0, 6)
failure_kinds = st.sampled_from(
    [("refund.failed", "failed"), ("refund.updated", "failed"), ("refund.updated", "canceled")]
)
reading_status = st.sampled_from([ObservationStatus.OK] * 6 + [ObservationStatus.INCONSISTENT])


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[Observation], dict[str, Any]]:
    successes = [
        _event(i, "refund.updated", "succeeded", BASE + draw(offsets))
        for i in range(draw(st.integers(0, 3)))
    ]
    failures = []
    for i in range(draw(st.integers(0, 2))):
        kind, status = draw(failure_kinds)
        failures.append(_event(10 + i, kind, status, BASE + draw(offsets)))
    readback_status = draw(reading_status)
    listing_status = draw(reading_status)
    status = draw(st.sampled_from(STATUSES))
    listing = {"object": "list", "data": [_refund(status)], "has_more": False, "count": 1}
    ok = ObservationStatus.OK
    observations = [
        Observation(
            "refund_readback",
            NOW,
            readback_status,
            _refund(status) if readback_status is ok else None,
        ),
        Observation(
            "charge_refunds", NOW, listing_status, listing if listing_status is ok else None
        ),
        Observation(
            "refund_created_events",
            NOW,
            ok,
            _reduction([_event(99, "refund.created", "pending", BASE)]),
        ),
        Observation("other_refund_created_events", NOW, ok, _reduction([])),
        Observation("refund_succeeded_events", NOW, ok, _reduction(successes)),
        Observation("refund_failure_events", NOW, ok, _reduction(failures)),
    ]
    facts = {
        "successes": [e["created"] for e in successes],
        "failures": [e["created"] for e in failures],
        "readback": (readback_status, status),
        "listing": listing_status,
    }
    return observations, facts


@settings(max_examples=600, deadline=None)
@given(worlds())
def test_no_verified_against_a_newer_failure_event_or_on_a_reading_that_went_back(
    world: tuple[list[Observation], dict[str, Any]],
) -> None:
    observations, facts = world
    decision = decide(C, FACTS, observations, NOW)
    failure_newer = bool(facts["failures"]) and (
        not facts["successes"] or max(facts["failures"]) >= max(facts["successes"])
    )
    inconsistent = ObservationStatus.INCONSISTENT in (facts["readback"][0], facts["listing"])
    if decision.verdict is Verdict.VERIFIED:
        assert not failure_newer, facts
        assert not inconsistent, facts
        assert facts["readback"] == (ObservationStatus.OK, "succeeded")
    if decision.reason == "failure_event_after_success":
        assert failure_newer, facts
        assert facts["successes"], facts
        assert decision.verdict is Verdict.PENDING
        assert not decision.final
        assert decision.supersedes
    elif decision.supersedes:
        raise AssertionError(f"only the failure rule supersedes: {decision.reason}")
    if (
        failure_newer
        and facts["successes"]
        and facts["readback"] == (ObservationStatus.OK, "succeeded")
    ):
        assert decision.reason == "failure_event_after_success", (decision.reason, facts)
