"""No verdict on the agent's word: a reported rejection is FAILED only once the contract's
``rejection`` section is confirmed on independent evidence read after the channels' latency."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.core.contract import Contract
from shared.core.engine import decide
from shared.core.retry import retry_guidance
from shared.core.types import ACTION_REJECTED_PHASE, Observation, ObservationStatus, Verdict
from tests.unit.core.builders import (
    NOW,
    T0,
    created_events,
    event,
    facts,
    load,
    readback,
    succeeded_event,
    webhook,
)

V110 = "refund.succeeded.v1.1.0"
REPORTED = T0 + timedelta(milliseconds=300)


def rejected(**overrides: object) -> object:
    values: dict[str, object] = {
        "action_result": None,
        "action_phase": ACTION_REJECTED_PHASE,
        "action_reported_at": REPORTED,
    }
    values.update(overrides)
    return facts(**values)


def listing(count: int, *, age_s: float = 0.5) -> Observation:
    data = [{"id": f"re_{i}", "object": "refund", "charge": "ch_1"} for i in range(count)]
    return Observation(
        "charge_refunds",
        NOW - timedelta(seconds=age_s),
        ObservationStatus.OK,
        {"object": "list", "data": data, "has_more": False, "count": count},
    )


def contract(name: str = V110) -> Contract:
    return load(name)


@pytest.mark.parametrize("name", [V110, "refund.created.v1.1.0"])
def test_confirmed_rejection_fails_and_allows_a_new_operation(name: str) -> None:
    c = contract(name)
    d = decide(c, rejected(), [listing(0), created_events(0)], NOW)
    assert (d.verdict, d.reason, d.final) == (Verdict.FAILED, "action_rejected", True)
    assert {r.id for r in d.conditions if r.kind == "rejection"} == {
        "no_refund_listed_since_operation",
        "no_refund_created_event_since_operation",
    }
    assert retry_guidance(d.verdict.value, d.reason, "FAILED").action == "allowed_as_new_operation"


@pytest.mark.parametrize(
    ("observations", "why"),
    [
        ([], "nothing read yet"),
        ([listing(0)], "the event channel was not read"),
        ([created_events(0)], "the refunds were not listed"),
        ([listing(1), created_events(0)], "a refund exists on the charge since the operation"),
        ([listing(0), created_events(1)], "a refund.created arrived"),
        ([listing(0, age_s=60), created_events(0)], "the listing is stale"),
    ],
)
def test_an_unconfirmed_rejection_stays_pending_and_never_allows_a_retry(
    observations: list[Observation], why: str
) -> None:
    d = decide(contract(), rejected(), observations, NOW)
    assert (d.verdict, d.reason, d.final) == (
        Verdict.PENDING,
        "awaiting_rejection_confirmation",
        False,
    ), why
    assert retry_guidance(d.verdict.value, d.reason, "PENDING").action == "never"


def test_evidence_read_before_the_channels_latency_passed_does_not_confirm() -> None:
    """refund_created_events' typical latency is 4 s: a reading 1 s after the report may miss
    an event still on its way."""
    early = REPORTED + timedelta(seconds=1)
    observations = [
        listing(0, age_s=0.1),
        Observation("refund_created_events", early, ObservationStatus.OK, {"count": 0}),
    ]
    d = decide(contract(), rejected(), observations, early + timedelta(seconds=0.2))
    assert d.reason == "awaiting_rejection_confirmation"
    later = REPORTED + timedelta(seconds=5)
    observations[1] = Observation(
        "refund_created_events", later, ObservationStatus.OK, {"count": 0}
    )
    observations[0] = Observation(
        "charge_refunds", later, ObservationStatus.OK, {"count": 0, "data": []}
    )
    assert decide(contract(), rejected(), observations, later).reason == "action_rejected"


def test_a_contract_without_the_section_never_fails_on_a_reported_rejection() -> None:
    """1.0.0 has no rejection section: the agent's word never fails it; the deadline decides."""
    d = decide(load(), rejected(), [created_events(0)], NOW)
    assert (d.verdict, d.final) == (Verdict.PENDING, False)
    past = decide(load(), rejected(deadline=NOW - timedelta(seconds=1)), [], NOW)
    assert past.verdict is Verdict.UNVERIFIABLE
    assert past.reason == "evidence_unavailable_before_timeout"


def test_evidence_of_the_refund_judges_a_reported_rejection_like_any_other() -> None:
    """A refund.created carrying the operation id taught it the refund: correlated, it is
    judged on the refund (here: succeeded, so VERIFIED), never FAILED."""
    c = contract()
    f = rejected(learned_keys={"refund_id": "re_1"})
    d = decide(c, f, [readback(), succeeded_event(), created_events(1), listing(1)], NOW)
    assert d.verdict is Verdict.VERIFIED


def test_the_agent_alone_never_confirms() -> None:
    """A rejection section whose conditions read no provider channel cannot confirm."""
    c = contract()
    section = c.document()["rejection"]
    section["confirm"] = [
        {
            "id": "agent_says_so",
            "meaning": "the agent says so",
            "path": "$input.amount",
            "op": "gt",
            "value": 0,
            "evidence": "charge_refunds",
        }
    ]
    forged = Contract.model_validate({**c.document(), "rejection": section})
    d = decide(forged, rejected(), [listing(0), created_events(0)], NOW)
    assert d.verdict is Verdict.PENDING


def test_another_refunds_event_contradicts_even_without_our_own() -> None:
    """1.1.0: a refund.created for the charge about another refund is a duplicate side effect
    on its own; counting every refund.created on the charge needed this operation's own event
    as well (late or lost, the second refund went unseen)."""
    c = contract()
    other = event("evt_other", "refund.created", id="re_2", status="pending")
    observations = [
        readback(),
        succeeded_event(),
        listing(1),
        webhook("refund_created_events", [other], contract=c),
        webhook("other_refund_created_events", [other], contract=c),
    ]
    d = decide(c, facts(), observations, NOW)
    assert (d.verdict, d.reason) == (Verdict.CONTRADICTED, "other_refund_created")
    own = event("evt_own", "refund.created", id="re_1", status="pending")
    clean = [
        readback(),
        succeeded_event(),
        listing(1),
        webhook("refund_created_events", [own], contract=c),
        webhook("other_refund_created_events", [own], contract=c),
    ]
    assert decide(c, facts(), clean, NOW).verdict is Verdict.VERIFIED
