"""The verdict engine against stripe.refund.succeeded: every acceptance case of the contract."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.core.context import build_context, correlation_keys
from shared.core.engine import deadline_of, decide, state_after
from shared.core.reasons import EXPLANATIONS
from shared.core.types import (
    Decision,
    Observation,
    ObservationStatus,
    OperationState,
    Verdict,
)
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


def run(observations: list[Observation], now: datetime = NOW, **fact_overrides: Any) -> Decision:
    return decide(C, facts(**fact_overrides), observations, now)


def condition(decision: Decision, condition_id: str) -> Any:
    return next(c for c in decision.conditions if c.id == condition_id)


def test_fresh_readback_and_correlated_event_verify() -> None:
    decision = run(verified_set())
    assert (decision.verdict, decision.reason, decision.final) == (
        Verdict.VERIFIED,
        "all_conditions_hold",
        True,
    )
    assert decision.class_ is None
    assert not decision.escalate
    assert state_after(decision) is OperationState.VERIFIED
    assert decision.subject_id == "re_1"
    assert ("resource_id", "strong", "re_1") in decision.correlation
    assert ("idempotency_key", "strong", "op_1") in decision.correlation
    assert ("fingerprint", "weak", {"charge": "ch_1", "amount": 500}) in decision.correlation
    assert all(c.holds is True for c in decision.conditions if c.kind == "completion")
    assert all(c.holds is False for c in decision.conditions if c.kind != "completion")
    assert len(decision.conditions) == len(C.completion) + len(C.negative) + len(C.verdict_map)
    used = {e.channel: e.used for e in decision.evidence}
    assert used == {
        "refund_readback": True,
        "refund_succeeded_events": True,
        "refund_created_events": False,
    }
    assert "succeeded" in (decision.explanation or "")
    amount = condition(decision, "refund_amount_matches")
    assert (amount.observed, amount.expected) == (500, 500)
    window = condition(decision, "refund_created_in_window")
    assert window.observed == T0_EPOCH
    assert window.expected == T0.isoformat()


def test_verified_without_the_refund_created_channel() -> None:
    decision = run([readback(), succeeded_event()])
    assert decision.verdict is Verdict.VERIFIED
    assert condition(decision, "duplicate_refund_present").note == "no_observation"


def test_readback_without_event_is_pending() -> None:
    decision = run([readback()])
    assert (decision.verdict, decision.reason, decision.final) == (
        Verdict.PENDING,
        "awaiting_evidence",
        False,
    )
    assert condition(decision, "refund_event_succeeded").holds is None
    assert state_after(decision) is OperationState.PENDING


def test_action_response_alone_is_pending() -> None:
    decision = run([], action_result={"id": "re_1", "status": "succeeded", "amount": 500})
    assert (decision.verdict, decision.reason) == (Verdict.PENDING, "awaiting_evidence")
    assert decision.explanation == EXPLANATIONS["awaiting_evidence"]
    assert all(e.status == "missing" and not e.used for e in decision.evidence)


@pytest.mark.parametrize(
    ("readback_fields", "reason", "class_"),
    [
        ({"amount": 499}, "refund_amount_mismatch", "wrong amount"),
        ({"charge": "ch_2"}, "refund_on_wrong_charge", "wrong subject"),
        ({"currency": "eur"}, "refund_currency_mismatch", "wrong amount"),
        ({"created": T0_EPOCH - 1}, "refund_predates_operation", "pre existing state"),
        ({"created": T0_EPOCH - 86_400}, "refund_predates_operation", "pre existing state"),
        ({"amount": 499, "charge": "ch_2"}, "refund_on_wrong_charge", "wrong subject"),
    ],
)
def test_negative_conditions_contradict(
    readback_fields: dict[str, Any], reason: str, class_: str
) -> None:
    decision = run(verified_set(**readback_fields))
    assert (decision.verdict, decision.reason, decision.class_, decision.final) == (
        Verdict.CONTRADICTED,
        reason,
        class_,
        True,
    )
    prose = next(n.reason for n in C.negative if n.id == reason)
    assert decision.explanation == prose
    assert state_after(decision) is OperationState.CONTRADICTED
    assert {e.channel for e in decision.evidence if e.used} == {"refund_readback"}


@pytest.mark.parametrize(
    "created",
    [T0_EPOCH, T0_EPOCH + 1, T0.isoformat(), "2026-09-10T12:00:00Z", float(T0_EPOCH)],
)
def test_refund_created_in_the_operation_second_or_later_is_not_contradicted(
    created: Any,
) -> None:
    decision = run(verified_set(created=created))
    assert decision.verdict is Verdict.VERIFIED
    assert condition(decision, "refund_predates_operation").holds is False


def test_two_refund_created_events_for_the_charge_contradict() -> None:
    decision = run([readback(), succeeded_event(), created_events(2)])
    assert (decision.verdict, decision.reason, decision.class_) == (
        Verdict.CONTRADICTED,
        "duplicate_refund_present",
        "duplicate side effect",
    )
    assert {e.channel for e in decision.evidence if e.used} == {"refund_created_events"}


def test_refund_created_events_of_other_charges_or_before_the_operation_do_not_count() -> None:
    other = event("evt_cr_x", "refund.created", id="re_9", charge="ch_2")
    before = event("evt_cr_y", "refund.created", id="re_8", at=T0 - timedelta(seconds=1))
    mine = event("evt_cr_z", "refund.created")
    observed = webhook("refund_created_events", [other, before, mine])
    decision = run([readback(), succeeded_event(), observed])
    assert decision.verdict is Verdict.VERIFIED
    assert condition(decision, "duplicate_refund_present").observed == 1


def test_failed_is_failed_terminal_failure() -> None:
    decision = run(verified_set(status="failed"))
    assert (decision.verdict, decision.reason, decision.final) == (
        Verdict.FAILED,
        "terminal_failure",
        True,
    )
    assert decision.explanation == next(
        r.reason for r in C.verdict_map if r.id == "terminal_failure"
    )
    assert state_after(decision) is OperationState.FAILED


@pytest.mark.parametrize("status", ["pending", "requires_action"])
def test_transitional_states_are_pending_still_transitional(status: str) -> None:
    decision = run(verified_set(status=status))
    assert (decision.verdict, decision.reason, decision.final) == (
        Verdict.PENDING,
        "still_transitional",
        False,
    )
    assert state_after(decision) is OperationState.PENDING


def test_canceled_is_contradicted() -> None:
    decision = run(verified_set(status="canceled"))
    assert (decision.verdict, decision.reason, decision.final) == (
        Verdict.CONTRADICTED,
        "canceled",
        True,
    )
    assert decision.class_ is None


@pytest.mark.parametrize("status", ["processing", "SUCCEEDED", "", None, 1])
def test_unknown_status_is_pending_never_verified(status: Any) -> None:
    decision = run(verified_set(status=status))
    assert (decision.verdict, decision.reason, decision.final) == (
        Verdict.PENDING,
        "awaiting_evidence",
        False,
    )


def test_stale_readback_is_pending_stale_reading() -> None:
    decision = run([readback(age_s=10.001), succeeded_event()])
    assert (decision.verdict, decision.reason) == (Verdict.PENDING, "stale_reading")
    status = condition(decision, "refund_status_succeeded")
    assert (status.holds, status.observed, status.note) == (None, None, "stale")
    row = next(e for e in decision.evidence if e.channel == "refund_readback")
    assert (row.fresh, row.used) == (False, False)


def test_readback_exactly_at_its_freshness_limit_still_decides() -> None:
    assert run([readback(age_s=10.0), succeeded_event()]).verdict is Verdict.VERIFIED


def test_webhook_channel_without_freshness_uses_the_stale_read_window() -> None:
    fresh = webhook("refund_succeeded_events", [event("evt_1")], age_s=20)
    stale = webhook("refund_succeeded_events", [event("evt_1")], age_s=20.5)
    assert run([readback(), fresh]).verdict is Verdict.VERIFIED
    assert run([readback(), stale]).reason == "stale_reading"


def test_past_deadline_is_unverifiable_before_timeout_for_a_person() -> None:
    later = T0 + timedelta(days=8)
    decision = run([readback(now=later, obs_status=ObservationStatus.UNAVAILABLE)], now=later)
    assert (decision.verdict, decision.reason, decision.final, decision.escalate) == (
        Verdict.UNVERIFIABLE,
        "evidence_unavailable_before_timeout",
        True,
        True,
    )
    assert state_after(decision) is OperationState.HUMAN_REVIEW
    assert "person" in (decision.explanation or "")


def test_deadline_defaults_to_action_report_plus_timeout() -> None:
    operation = facts()
    expected = operation.action_reported_at + timedelta(milliseconds=C.timing.timeout_ms)  # type: ignore[operator]
    assert deadline_of(C, operation) == expected
    assert deadline_of(C, facts(action_reported_at=None)) == T0 + timedelta(days=7)
    naive = datetime(2026, 9, 20, 0, 0)
    assert deadline_of(C, facts(deadline=naive)) == naive.replace(tzinfo=UTC)
    assert run([], now=expected - timedelta(microseconds=1)).verdict is Verdict.PENDING
    assert run([], now=expected).reason == "evidence_unavailable_before_timeout"


def test_explicit_deadline_applies() -> None:
    deadline = NOW - timedelta(seconds=1)
    decision = run([readback()], deadline=deadline)
    assert decision.reason == "evidence_unavailable_before_timeout"


def test_evidence_arriving_by_the_deadline_still_verifies() -> None:
    later = T0 + timedelta(days=8)
    observations = [
        readback(now=later, created=T0_EPOCH),
        webhook("refund_succeeded_events", [event("evt_1")], now=later),
    ]
    assert run(observations, now=later).verdict is Verdict.VERIFIED


def test_transitional_state_past_the_deadline_gives_the_on_timeout_verdict() -> None:
    later = T0 + timedelta(days=8)
    decision = run([readback(now=later, status="pending")], now=later)
    assert decision.reason == "evidence_unavailable_before_timeout"
    still = condition(decision, "still_transitional")
    assert still.holds is True


@pytest.mark.parametrize("status", [ObservationStatus.UNAVAILABLE, ObservationStatus.ERROR])
def test_unavailable_channel_is_unverifiable_not_final(status: ObservationStatus) -> None:
    decision = run([readback(obs_status=status), succeeded_event()])
    assert (decision.verdict, decision.reason, decision.final) == (
        Verdict.UNVERIFIABLE,
        "evidence_unavailable",
        False,
    )
    assert state_after(decision) is OperationState.PENDING
    assert condition(decision, "refund_status_succeeded").note == "channel_unavailable"


def test_later_decisive_observation_replaces_unavailable() -> None:
    outage = readback(age_s=3, obs_status=ObservationStatus.UNAVAILABLE)
    for observations in ([readback(age_s=4), outage], [outage, readback(age_s=4)]):
        assert run([*observations, succeeded_event()]).verdict is Verdict.UNVERIFIABLE
    for observations in ([readback(age_s=2), outage], [outage, readback(age_s=2)]):
        assert run([*observations, succeeded_event()]).verdict is Verdict.VERIFIED


def test_only_the_latest_reading_of_a_channel_counts() -> None:
    older_success = readback(age_s=3)
    newer_pending = readback(age_s=2, status="pending")
    decision = run([newer_pending, older_success, succeeded_event()])
    assert decision.reason == "still_transitional"
    row = next(e for e in decision.evidence if e.channel == "refund_readback")
    assert row.observed_at == NOW - timedelta(seconds=2)


def test_not_found_readback_is_pending() -> None:
    decision = run([readback(obs_status=ObservationStatus.NOT_FOUND), succeeded_event()])
    assert (decision.verdict, decision.reason) == (Verdict.PENDING, "awaiting_evidence")
    assert condition(decision, "refund_status_succeeded").note == "not_found"


def test_observations_of_undeclared_channels_are_ignored() -> None:
    stray = Observation("somebody_else", NOW, ObservationStatus.UNAVAILABLE, None)
    assert run([*verified_set(), stray]).verdict is Verdict.VERIFIED


@pytest.mark.parametrize(
    "action_result", [None, {}, {"id": ""}, {"id": None}, {"id": True}, {"error": "timeout"}]
)
def test_without_the_subject_id_nothing_decides(action_result: Any) -> None:
    decision = run(verified_set(status="failed"), action_result=action_result)
    assert (decision.verdict, decision.reason) == (Verdict.PENDING, "awaiting_correlation")
    assert decision.subject_id is None
    assert decision.explanation == EXPLANATIONS["awaiting_correlation"]
    assert [c[0] for c in decision.correlation] == ["idempotency_key", "fingerprint"]


def test_uncorrelated_past_deadline_gives_the_on_timeout_verdict() -> None:
    decision = run([], now=T0 + timedelta(days=8), action_result=None)
    assert decision.reason == "evidence_unavailable_before_timeout"


def test_a_learned_refund_id_correlates_an_action_that_timed_out() -> None:
    decision = run(verified_set(), action_result=None, learned_keys={"refund_id": "re_1"})
    assert decision.verdict is Verdict.VERIFIED
    assert decision.subject_id == "re_1"


def test_conflicting_reported_and_learned_subject_decides_nothing() -> None:
    decision = run(verified_set(), learned_keys={"refund_id": "re_2"})
    assert (decision.verdict, decision.reason) == (Verdict.PENDING, "correlation_conflict")
    assert "refund_id" not in correlation_keys(C, facts(learned_keys={"refund_id": "re_2"}))


def test_integer_subject_ids_correlate() -> None:
    operation = facts(action_result={"id": 42})
    assert correlation_keys(C, operation)["refund_id"] == 42


def test_build_context_fills_correlation_and_observed() -> None:
    context = build_context(C, facts(), {"refund_readback": {"status": "succeeded"}})
    assert context.correlation["refund_id"] == "re_1"
    assert context.observed == {"refund_readback": {"status": "succeeded"}}
    assert build_context(C, facts()).observed == {}


def test_unsupported_api_version_is_noted_on_the_conditions_reading_the_channel() -> None:
    old = event("evt_old", api_version="2020-08-27")
    decision = run([readback(), webhook("refund_succeeded_events", [old])])
    result = condition(decision, "refund_event_succeeded")
    assert (result.holds, result.note) == (False, "api_version_unsupported")
    assert decision.verdict is Verdict.PENDING


def test_conditions_record_unknown_as_null_and_times_as_iso() -> None:
    decision = run([])
    status = condition(decision, "refund_status_succeeded")
    assert (status.holds, status.observed, status.expected, status.note) == (
        None,
        None,
        "succeeded",
        "no_observation",
    )
    assert condition(decision, "refund_created_in_window").expected == T0.isoformat()
    assert condition(decision, "terminal_failure").expected == ["failed"]


def test_verdict_map_rules_cannot_verify_or_expire() -> None:
    document = C.document()
    rules = [
        {**document["verdict_map"][0], "id": "sneaky", "value": ["succeeded"], "verdict": v}
        for v in ("VERIFIED", "EXPIRED")
    ]
    contract = variant(verdict_map=[rules[0], rules[1], *document["verdict_map"]])
    decision = decide(contract, facts(), [readback()], NOW)
    assert (decision.verdict, decision.reason) == (Verdict.PENDING, "awaiting_evidence")
    assert {c.id: c.note for c in decision.conditions if c.id == "sneaky"} == {
        "sneaky": "verdict_not_allowed_in_map"
    }
    assert decide(contract, facts(), verified_set(), NOW).reason == "all_conditions_hold"


def test_unverifiable_from_the_verdict_map_is_not_final() -> None:
    document = C.document()
    rule = {**document["verdict_map"][0], "id": "odd", "value": ["odd"], "verdict": "UNVERIFIABLE"}
    contract = variant(verdict_map=[rule])
    decision = decide(contract, facts(), verified_set(status="odd"), NOW)
    assert (decision.verdict, decision.reason, decision.final) == (
        Verdict.UNVERIFIABLE,
        "odd",
        False,
    )


@pytest.mark.parametrize("configured", ["VERIFIED", "FAILED"])
def test_on_timeout_can_never_verify_or_fail(configured: str) -> None:
    timing = C.document()["timing"]
    timing["on_timeout"] = {"verdict": configured, "reason": "x", "escalate": "none"}
    contract = variant(timing=timing)
    decision = decide(contract, facts(), [], T0 + timedelta(days=8))
    assert (decision.verdict, decision.final, decision.escalate) == (
        Verdict.UNVERIFIABLE,
        True,
        False,
    )
    assert state_after(decision) is OperationState.UNVERIFIABLE


def test_on_timeout_expired_without_escalation() -> None:
    timing = C.document()["timing"]
    timing["on_timeout"] = {"verdict": "EXPIRED", "reason": "gave_up", "escalate": "none"}
    decision = decide(variant(timing=timing), facts(), [], T0 + timedelta(days=8))
    assert (decision.verdict, decision.reason) == (Verdict.EXPIRED, "gave_up")
    assert state_after(decision) is OperationState.EXPIRED
    assert "person" not in (decision.explanation or "")


def _evidence(**changes: Any) -> Any:
    document = C.document()["evidence"]
    document.update(changes)
    return document


@pytest.mark.parametrize(
    ("evidence", "verdict"),
    [
        (_evidence(minimum_channels=2), Verdict.VERIFIED),
        (_evidence(minimum_channels=3), Verdict.PENDING),
        (_evidence(minimum_level="E3"), Verdict.VERIFIED),
        (_evidence(minimum_level="E4"), Verdict.PENDING),
        (_evidence(minimum_level="E1"), Verdict.VERIFIED),
        (_evidence(independent_channel_required=False), Verdict.VERIFIED),
    ],
)
def test_evidence_requirements(evidence: Any, verdict: Verdict) -> None:
    decision = decide(variant(evidence=evidence), facts(), verified_set(), NOW)
    assert decision.verdict is verdict
    if verdict is Verdict.PENDING:
        assert decision.reason == "evidence_requirements_not_met"
        assert not any(e.used for e in decision.evidence)


def test_readback_only_contract_cannot_meet_a_two_channel_requirement() -> None:
    document = C.document()
    completion = [c for c in document["completion"] if c["evidence"] == "refund_readback"]
    contract = variant(completion=completion, evidence=_evidence(minimum_channels=2))
    decision = decide(contract, facts(), [readback()], NOW)
    assert decision.reason == "evidence_requirements_not_met"
    relaxed = variant(completion=completion)
    assert decide(relaxed, facts(), [readback()], NOW).verdict is Verdict.VERIFIED


def test_a_channel_that_is_not_independent_does_not_satisfy_independence() -> None:
    document = C.document()
    channels = [{**ch, "independence": "none"} for ch in document["channels"]]
    decision = decide(variant(channels=channels), facts(), verified_set(), NOW)
    assert decision.reason == "evidence_requirements_not_met"
    relaxed = variant(channels=channels, evidence=_evidence(independent_channel_required=False))
    assert decide(relaxed, facts(), verified_set(), NOW).verdict is Verdict.VERIFIED


def test_evidence_named_by_a_condition_must_have_been_read() -> None:
    document = C.document()
    completion = [dict(c) for c in document["completion"]]
    completion[0]["evidence"] = "refund_created_events"  # declared but not read by the path
    contract = variant(completion=completion)
    assert decide(contract, facts(), [readback(), succeeded_event()], NOW).reason == (
        "evidence_requirements_not_met"
    )
    assert decide(contract, facts(), verified_set(), NOW).verdict is Verdict.VERIFIED


def test_list_operands_with_expressions_and_exists() -> None:
    document = C.document()
    completion = [
        *document["completion"],
        {
            "id": "currency_listed",
            "meaning": "m",
            "path": "$observed.refund_readback.currency",
            "op": "in",
            "value": ["$input.currency", "usd"],
            "evidence": "refund_readback",
        },
        {
            "id": "no_failure_reason",
            "meaning": "m",
            "path": "$observed.refund_readback.failure_reason",
            "op": "exists",
            "value": False,
            "evidence": "refund_readback",
        },
    ]
    contract = variant(completion=completion)
    decision = decide(contract, facts(), verified_set(), NOW)
    assert decision.verdict is Verdict.VERIFIED
    assert condition(decision, "currency_listed").expected == ["usd", "usd"]
    failing = decide(contract, facts(), verified_set(failure_reason="lost"), NOW)
    assert failing.verdict is Verdict.PENDING
    assert condition(decide(contract, facts(), [], NOW), "no_failure_reason").holds is None


def test_decide_accepts_naive_times_as_utc() -> None:
    naive_now = NOW.replace(tzinfo=None)
    naive = [
        Observation(o.channel, o.observed_at.replace(tzinfo=None), o.status, o.value)
        for o in verified_set()
    ]
    assert decide(C, facts(), naive, naive_now).verdict is Verdict.VERIFIED


def test_the_same_decision_for_the_same_inputs_and_a_reused_contract_object() -> None:
    first = decide(C, facts(), verified_set(), NOW)
    again = decide(load(), facts(), verified_set(), NOW)
    assert first == again
    copy = variant()
    assert decide(copy, facts(), verified_set(), NOW) == first


def test_refund_created_contract_verifies_the_created_level() -> None:
    created = load("refund.created")
    decision = decide(created, facts(), [readback(status="pending")], NOW)
    assert decision.verdict is Verdict.VERIFIED
    assert "'created'" in (decision.explanation or "")


def test_the_compile_cache_is_bounded_and_keyed_by_identity() -> None:
    copies = [C.model_copy() for _ in range(140)]
    for copy in copies:
        assert decide(copy, facts(), verified_set(), NOW).verdict is Verdict.VERIFIED
    assert decide(C, facts(), verified_set(), NOW).verdict is Verdict.VERIFIED


def test_an_incomplete_optional_strategy_is_left_out_of_the_correlation() -> None:
    decision = run(verified_set(), input={"amount": 500, "currency": "usd"})
    assert [c[0] for c in decision.correlation] == ["resource_id", "idempotency_key"]
    assert decision.verdict is Verdict.VERIFIED


def test_unusual_observed_values_are_recorded_as_given() -> None:
    decision = run(verified_set(status=("succeeded",)))
    assert condition(decision, "refund_status_succeeded").observed == ("succeeded",)
    assert decision.verdict is Verdict.PENDING


class _RefundId(str):
    pass


def test_subject_ids_of_str_subclasses_correlate() -> None:
    assert (
        correlation_keys(C, facts(action_result={"id": _RefundId("re_1")}))["refund_id"] == "re_1"
    )
    assert "refund_id" not in correlation_keys(C, facts(action_result={"id": _RefundId("")}))


def test_a_read_only_mapping_reduction_is_read_like_a_dict() -> None:
    from types import MappingProxyType

    reduction = webhook("refund_succeeded_events", [event("evt_old", api_version="2020-08-27")])
    frozen = Observation(
        reduction.channel,
        reduction.observed_at,
        reduction.status,
        MappingProxyType(reduction.value),
    )
    decision = run([readback(), frozen])
    assert condition(decision, "refund_event_succeeded").note == "api_version_unsupported"
