"""The engine's frozen safety rules 1-9, one test (or table) per rule, named after it.

Where a rule is enforced outside the core (rule 9's signature check lives in the webhook
intake, rule 8's SQL guard in persistence) these tests hold the core's part of it.
"""

from __future__ import annotations

import itertools
import random
from datetime import timedelta
from typing import Any

import pytest

from shared.core import IllegalTransition
from shared.core.context import build_context
from shared.core.engine import decide, state_after
from shared.core.events import reduce_events
from shared.core.retry import retry_guidance
from shared.core.state_machine import FINAL_STATES, transition
from shared.core.types import ObservationStatus, OperationState, Verdict
from tests.unit.core.builders import (
    NOW,
    T0,
    T0_EPOCH,
    created_events,
    event,
    facts,
    load,
    readback,
    succeeded_event,
    variant,
    verified_set,
    webhook,
)

C = load()


def test_safety_rule_1_the_action_response_never_verifies() -> None:
    claims = {"id": "re_1", "status": "succeeded", "amount": 500, "currency": "usd"}
    assert decide(C, facts(action_result=claims), [], NOW).verdict is Verdict.PENDING
    # a contract that tries to verify from the action response and asks only for E1
    document = C.document()
    completion = [
        {
            "id": "agent_says_succeeded",
            "meaning": "m",
            "path": "$action.result.status",
            "op": "eq",
            "value": "succeeded",
            "evidence": "refund_readback",
        }
    ]
    evidence = {
        **document["evidence"],
        "minimum_level": "E1",
        "independent_channel_required": False,
    }
    naive = variant(completion=completion, evidence=evidence)
    decision = decide(naive, facts(action_result=claims), [], NOW)
    assert decision.verdict is Verdict.PENDING
    assert decision.reason == "evidence_requirements_not_met"
    # an E1 channel declared by the contract does not count as evidence either
    channels = [{**ch, "level": "E1"} for ch in document["channels"]]
    e1_only = variant(channels=channels, evidence=evidence)
    assert decide(e1_only, facts(), verified_set(), NOW).verdict is Verdict.PENDING


def test_safety_rule_2_a_lower_completion_level_is_not_terminal_success() -> None:
    created = load("refund.created")
    pending_refund = [readback(status="pending"), created_events(1)]
    at_created_level = decide(created, facts(), pending_refund, NOW)
    at_succeeded_level = decide(C, facts(), pending_refund, NOW)
    assert at_created_level.verdict is Verdict.VERIFIED
    assert "'created'" in (at_created_level.explanation or "")
    assert at_succeeded_level.verdict is Verdict.PENDING
    assert not at_succeeded_level.final


@pytest.mark.parametrize(
    ("observations", "reason"),
    [
        ([readback(obs_status=ObservationStatus.UNAVAILABLE)], "evidence_unavailable"),
        ([readback(obs_status=ObservationStatus.ERROR)], "evidence_unavailable"),
        ([readback(status="pending"), succeeded_event()], "still_transitional"),
        ([readback(status="processing")], "awaiting_evidence"),
        ([readback(age_s=60, status="failed")], "stale_reading"),
        ([readback(obs_status=ObservationStatus.NOT_FOUND)], "awaiting_evidence"),
    ],
)
def test_safety_rule_3_pending_not_failed_while_progress_is_possible(
    observations: list[Any], reason: str
) -> None:
    decision = decide(C, facts(), observations, NOW)
    assert decision.verdict in {Verdict.PENDING, Verdict.UNVERIFIABLE}
    assert decision.reason == reason
    assert not decision.final
    assert state_after(decision) is OperationState.PENDING


def test_safety_rule_3_a_timeout_is_never_failed() -> None:
    timing = C.document()["timing"]
    timing["on_timeout"] = {"verdict": "FAILED", "reason": "gave_up", "escalate": "human_review"}
    decision = decide(variant(timing=timing), facts(), [], T0 + timedelta(days=8))
    assert decision.verdict is Verdict.UNVERIFIABLE


@pytest.mark.parametrize(
    ("verdict", "reason", "state"),
    [
        (Verdict.PENDING, "awaiting_evidence", OperationState.PENDING),
        (Verdict.PENDING, "awaiting_correlation", OperationState.OBSERVING),
        (Verdict.PENDING, "still_transitional", OperationState.PENDING),
        (Verdict.PENDING, "stale_reading", OperationState.PENDING),
        (Verdict.UNVERIFIABLE, "evidence_unavailable", OperationState.PENDING),
        (Verdict.UNVERIFIABLE, "evidence_unavailable_before_timeout", OperationState.HUMAN_REVIEW),
        (Verdict.UNVERIFIABLE, "evidence_unavailable_before_timeout", OperationState.UNVERIFIABLE),
    ],
)
def test_safety_rule_4_never_advise_repeating_the_action_while_pending_or_unverifiable(
    verdict: Verdict, reason: str, state: OperationState
) -> None:
    assert retry_guidance(verdict, reason, state).action == "never"


def test_safety_rule_4_every_pending_or_unverifiable_decision_forbids_a_retry() -> None:
    cases = [
        [],
        [readback(obs_status=ObservationStatus.UNAVAILABLE)],
        [readback(status="pending")],
        [readback()],
    ]
    for observations in cases:
        decision = decide(C, facts(), observations, NOW)
        assert decision.verdict in {Verdict.PENDING, Verdict.UNVERIFIABLE}
        guidance = retry_guidance(decision.verdict, decision.reason, state_after(decision))
        assert guidance.action == "never"


def test_safety_rule_5_arrival_order_decides_nothing() -> None:
    records = [
        event("evt_1", at=T0 + timedelta(seconds=3)),
        event("evt_2", at=T0 + timedelta(seconds=3), status="pending"),
        event("evt_3", at=T0 + timedelta(seconds=1)),
        event("evt_1", at=T0 + timedelta(seconds=3)),
    ]
    channel = C.channel("refund_succeeded_events")
    context = build_context(C, facts())
    reductions = [
        reduce_events(
            channel,
            list(arrival),
            context=context,
            operation_created_at=T0,
            api_versions=C.provider_api_versions,
        )
        for arrival in itertools.permutations(records)
    ]
    assert all(r == reductions[0] for r in reductions)
    assert [body["id"] for body in reductions[0]["events"]] == ["evt_3", "evt_1"]
    assert reductions[0]["duplicates_dropped"] == 1
    decisions = {
        decide(
            C, facts(), [readback(), webhook("refund_succeeded_events", list(arrival))], NOW
        ).verdict
        for arrival in itertools.permutations(records)
    }
    assert decisions == {Verdict.VERIFIED}


def test_safety_rule_6_evidence_must_correlate_with_the_exact_operation() -> None:
    # no subject id: nothing decides, even a failed refund
    uncorrelated = decide(C, facts(action_result=None), verified_set(status="failed"), NOW)
    assert uncorrelated.reason == "awaiting_correlation"
    # an event of another refund, or from before the operation, proves nothing
    other_refund = webhook("refund_succeeded_events", [event("evt_9", id="re_2")])
    before = webhook("refund_succeeded_events", [event("evt_8", at=T0 - timedelta(seconds=1))])
    for events in (other_refund, before):
        assert decide(C, facts(), [readback(), events], NOW).verdict is Verdict.PENDING
    # state that existed before the operation contradicts it
    old_refund = decide(C, facts(), verified_set(created=T0_EPOCH - 1), NOW)
    assert (old_refund.verdict, old_refund.reason) == (
        Verdict.CONTRADICTED,
        "refund_predates_operation",
    )


@pytest.mark.parametrize(
    "fields",
    [{"status": "failed"}, {"amount": 1}, {"charge": "ch_2"}, {"status": "canceled"}, {}],
)
def test_safety_rule_7_a_stale_reading_does_not_decide(fields: dict[str, Any]) -> None:
    decision = decide(C, facts(), [readback(age_s=10.5, **fields), succeeded_event()], NOW)
    assert (decision.verdict, decision.reason, decision.final) == (
        Verdict.PENDING,
        "stale_reading",
        False,
    )


@pytest.mark.parametrize("final", sorted(FINAL_STATES))
def test_safety_rule_8_final_verdicts_are_immutable(final: OperationState) -> None:
    rewrites = [s for s in OperationState if s is not OperationState.HUMAN_REVIEW]
    for target in rewrites:
        with pytest.raises(IllegalTransition):
            transition(final, target)
    if final in {OperationState.EXPIRED, OperationState.HUMAN_REVIEW}:
        with pytest.raises(IllegalTransition):
            transition(final, OperationState.HUMAN_REVIEW)
    else:
        # late contradicting evidence is appended: the operation is flagged, not rewritten
        assert transition(final, OperationState.HUMAN_REVIEW) is OperationState.HUMAN_REVIEW


def test_safety_rule_9_the_agent_is_never_evidence() -> None:
    document = C.document()
    agent_rules = [
        {
            "id": "agent_says_failed",
            "path": "$action.result.status",
            "op": "eq",
            "value": "failed",
            "verdict": "FAILED",
            "reason": "r",
        },
        *document["verdict_map"],
    ]
    agent_negative = [
        {
            "id": "agent_says_wrong",
            "class": "wrong amount",
            "reason": "r",
            "path": "$action.result.amount",
            "op": "ne",
            "value": "$input.amount",
        },
        *document["negative"],
    ]
    contract = variant(verdict_map=agent_rules, negative=agent_negative)
    claims = facts(action_result={"id": "re_1", "status": "failed", "amount": 1})
    pending = decide(contract, claims, [], NOW)
    assert pending.verdict is Verdict.PENDING
    notes = {c.id: c.note for c in pending.conditions}
    assert notes["agent_says_failed"] == "not_evidence"
    assert notes["agent_says_wrong"] == "not_evidence"
    # the provider's own evidence still decides
    assert decide(contract, claims, verified_set(), NOW).verdict is Verdict.VERIFIED


def test_safety_rule_5_the_order_of_observations_decides_nothing() -> None:
    observations = [*verified_set(), readback(age_s=5, status="pending")]
    expected = decide(C, facts(), observations, NOW)
    rng = random.Random(7)
    for _ in range(20):
        rng.shuffle(observations)
        assert decide(C, facts(), observations, NOW) == expected
