"""The verdict engine: a pure function from (contract, operation, observations, now) to a verdict.

This module owns :func:`decide`, :func:`state_after` and :func:`deadline_of`. A decision is a
short pipeline of named phases; each is a function below that takes and returns small frozen
values, so a new rule has one obvious place to go:

1. **Readings** (:func:`_readings` → :class:`Readings`). Per declared channel only its latest
   observation counts (latest ``observed_at``; on a tie the first given wins), and only when its
   status is ``ok`` and its age is within the channel's ``freshness_ms`` (else
   ``timing.stale_read_window_ms``). An unusable channel is absent from ``$observed`` and its
   conditions are unknown. Every condition of the contract is then evaluated once against the
   readings (:func:`_evaluate`: each condition's result for the record, and its truth by
   index); the later phases only look up truths.
2. **Correlation** (:func:`_correlation` → :class:`Correlation`). The subject identity key
   (``$correlation.<subject key>``: its expression, else a key the operation learned) must be
   known, every ``required`` strategy's keys must be known and at least one strong strategy must
   be complete. Otherwise PENDING ``awaiting_correlation`` (``correlation_conflict`` when the
   expression and a learned key disagree), and nothing else decides — except **a reported
   rejection** (:func:`_uncorrelated`): when the agent reported an error its provider's skill
   reads as "not performed" (``facts.action_rejected``), FAILED ``action_rejected`` only when
   every condition of the contract's ``rejection`` section holds on a usable provider reading
   taken at least the channel's typical latency after the report; else PENDING
   ``awaiting_rejection_confirmation``. The agent's word alone never decides.
3. **Negative conditions** (:func:`_negative`): the first that holds gives CONTRADICTED,
   reason = its id, ``class_`` = its class, final.
4. **Verdict map** (:func:`_verdict_map`): the first rule that holds gives its verdict, reason =
   its id. FAILED and CONTRADICTED are final; PENDING and UNVERIFIABLE are not (past the deadline
   they give way to the on-timeout verdict). A rule whose verdict is VERIFIED or EXPIRED is
   ignored: only the completion phase verifies.
5. **Completion** (:func:`_completion`): every completion condition true and the evidence
   requirements met — highest level ≥ ``minimum_level`` (never below E2), an independent channel
   (level ≥ E2 and an ``independence`` other than none/agent/action response) when required, at
   least ``minimum_channels`` distinct channels of level ≥ E2 — among the channels the completion
   conditions read: VERIFIED ``all_conditions_hold``, final. Otherwise, a channel whose latest
   observation is ``unavailable``/``error`` gives UNVERIFIABLE ``evidence_unavailable`` (not
   final); else PENDING ``inconsistent_reading`` / ``stale_reading`` /
   ``evidence_requirements_not_met`` / ``awaiting_evidence``.
6. **Timing** (:func:`_timed_out`): an outcome that is not final, past the deadline
   (``facts.deadline``, else the action report or creation time plus ``timing.timeout_ms``;
   reached when ``now >= deadline``), becomes the on-timeout verdict, final, escalated when
   ``escalate: human_review`` (an on-timeout verdict of VERIFIED or FAILED is read as
   UNVERIFIABLE: a timeout proves neither).

Phases 3 to 5 run only when phase 2 found the subject; the first of them to give an
:class:`Outcome` wins. ``facts.attempts`` never ends an operation: polling stops at
``timing.max_attempts`` (see ``schedule``) but callbacks still arrive and decide until the
deadline.

The agent is never evidence: a negative condition or verdict-map rule that reads no
``$observed`` channel never decides (its result carries the note ``not_evidence``), and only
channels of level E2 or above count towards the evidence requirements.

Each contract is compiled once (expressions parsed, channels indexed) and cached by identity
(``shared.core.compiled``); the evaluation context and the correlation keys are
``shared.core.context``'s. Where to add things: a new condition operator goes to
``shared.core.operators`` (the engine never sees operators); a new kind of rule that decides
before completion is a phase function here returning ``Outcome | None``, chained in
:func:`decide` in the order the contract's authors should read it. Outcomes that depend only on
the contract (a rule's, the VERIFIED one) are made once per rule and cached.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Final

from shared.core.compiled import (
    NOT_LITERAL,
    PLAIN_TYPES,
    CompiledChannel,
    CompiledCondition,
    CompiledContract,
    compiled_contract,
    plain,
)
from shared.core.context import base_context, correlation_of
from shared.core.contract import Contract
from shared.core.expressions import EvaluationContext
from shared.core.reasons import ACTION_REJECTED, AWAITING_REJECTION, EXPLANATIONS
from shared.core.types import (
    ConditionResult,
    Decision,
    EvidenceUsed,
    Observation,
    ObservationStatus,
    OperationFacts,
    OperationState,
    Verdict,
)

__all__ = [
    "deadline_of",
    "decide",
    "state_after",
]

_FINAL_FROM_MAP: Final = frozenset({Verdict.FAILED, Verdict.CONTRADICTED})
_UNAVAILABLE: Final = frozenset({ObservationStatus.UNAVAILABLE, ObservationStatus.ERROR})
_RULES_CACHED: Final = 4096  # outcomes of negative conditions and rules, each made once


@dataclass(frozen=True, slots=True)
class Readings:
    """Phase 1: what the channels say at ``now``.

    ``observed`` holds the values of the usable channels (``$observed``); ``notes`` why a
    channel is not usable (or what to know about its value); ``fresh`` whether each observed
    channel's latest reading is within its window; ``trouble`` the worst reason to wait the
    readings give, if any: ``evidence_unavailable`` (a channel is down), else
    ``inconsistent_reading``, else ``stale_reading`` (a channel completion reads is too old).
    """

    observed: dict[str, Any]
    notes: Mapping[str, str]
    fresh: Mapping[str, bool]
    trouble: str | None


@dataclass(frozen=True, slots=True)
class Correlation:
    """Phase 2: whether the subject is known, and the strategies whose keys are complete."""

    subject_id: Any
    correlated: bool
    strategies: tuple[tuple[str, str, Any], ...]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a phase decided: everything of a :class:`Decision` but the record of its inputs.

    ``decided_by`` names the channels whose evidence decided; ``checked`` holds the results of
    the rejection conditions, added to the record after the contract's own conditions.
    """

    verdict: Verdict
    reason: str
    explanation: str | None
    final: bool = False
    class_: str | None = None
    escalate: bool = False
    supersedes: bool = False
    decided_by: frozenset[str] = frozenset()
    checked: tuple[ConditionResult, ...] = ()


def _pending(reason: str) -> Outcome:
    return Outcome(Verdict.PENDING, reason, EXPLANATIONS[reason])


_AWAITING_CORRELATION: Final = _pending("awaiting_correlation")
_CORRELATION_CONFLICT: Final = _pending("correlation_conflict")
_UNAVAILABLE_REASON: Final = "evidence_unavailable"
_WAITING: Final = {
    _UNAVAILABLE_REASON: Outcome(
        Verdict.UNVERIFIABLE, _UNAVAILABLE_REASON, EXPLANATIONS[_UNAVAILABLE_REASON]
    ),
    **{
        reason: _pending(reason)
        for reason in (
            "awaiting_evidence",
            "evidence_requirements_not_met",
            "inconsistent_reading",
            "stale_reading",
        )
    },
}
_TROUBLE_RANK: Final = {
    None: 0,
    "stale_reading": 1,
    "inconsistent_reading": 2,
    _UNAVAILABLE_REASON: 3,
}


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def deadline_of(contract: Contract, facts: OperationFacts) -> datetime:
    """``facts.deadline``, else the action report (or creation) time plus the timeout."""
    return _deadline(compiled_contract(contract), facts)


def _deadline(compiled: CompiledContract, facts: OperationFacts) -> datetime:
    if facts.deadline is not None:
        return _utc(facts.deadline)
    start = facts.action_reported_at or facts.created_at
    return _utc(start) + compiled.timeout


def decide(
    contract: Contract,
    facts: OperationFacts,
    observations: Sequence[Observation] | Iterable[Observation],
    now: datetime,
) -> Decision:
    """Evaluate ``contract`` for one operation at ``now``; see the module docstring."""
    compiled = compiled_contract(contract)
    now = _utc(now)
    context = base_context(facts)
    keys, conflict = correlation_of(compiled, facts, context)
    context.correlation = keys
    latest = _latest(compiled, observations)
    readings = _readings(compiled, latest, now)
    context.observed = readings.observed
    results, truths = _evaluate(compiled, context, readings.notes)
    correlation = _correlation(compiled, keys, conflict=conflict)
    if correlation.correlated:
        outcome = (
            _negative(compiled, truths)
            or _verdict_map(compiled, truths)
            or _completion(compiled, truths, readings)
        )
    else:
        outcome = _uncorrelated(compiled, facts, context, latest, conflict=conflict)
    if not outcome.final and now >= _deadline(compiled, facts):
        outcome = _timed_out(compiled, outcome.checked)
    fresh, decided_by = readings.fresh, outcome.decided_by
    return Decision(
        verdict=outcome.verdict,
        reason=outcome.reason,
        class_=outcome.class_,
        final=outcome.final,
        conditions=tuple(results) + outcome.checked if outcome.checked else tuple(results),
        evidence=tuple(
            [
                _evidence_row(channel, latest.get(channel.name), fresh, decided_by)
                for channel in compiled.channels
            ]
        ),
        correlation=correlation.strategies,
        subject_id=correlation.subject_id,
        escalate=outcome.escalate,
        explanation=outcome.explanation,
        supersedes=outcome.supersedes,
    )


# -- Phase 1: readings --------------------------------------------------------------------------


def _latest(
    compiled: CompiledContract, observations: Iterable[Observation]
) -> dict[str, Observation]:
    latest: dict[str, Observation] = {}
    known = compiled.channel_by_name
    for obs in observations:
        name = obs.channel
        if name not in known:
            continue
        current = latest.get(name)
        if current is None or _utc(obs.observed_at) > _utc(current.observed_at):
            latest[name] = obs
    return latest


def _readings(
    compiled: CompiledContract, latest: Mapping[str, Observation], now: datetime
) -> Readings:
    observed: dict[str, Any] = {}
    notes: dict[str, str] = {}
    fresh: dict[str, bool] = {}
    trouble: str | None = None
    for channel in compiled.channels:
        name = channel.name
        obs = latest.get(name)
        if obs is None:
            notes[name] = "no_observation"
            continue
        observed_at = obs.observed_at
        if observed_at.tzinfo is None:
            observed_at = observed_at.replace(tzinfo=UTC)
        is_fresh = fresh[name] = now - observed_at <= channel.freshness
        status = obs.status
        if status != ObservationStatus.OK:
            if status in _UNAVAILABLE:
                notes[name] = "channel_unavailable"
                trouble = _worse(trouble, _UNAVAILABLE_REASON)
            elif status == ObservationStatus.INCONSISTENT:
                notes[name] = "inconsistent_reading"
                trouble = _worse(trouble, "inconsistent_reading")
            else:
                notes[name] = "not_found"
        elif not is_fresh:
            notes[name] = "stale"
            if name in compiled.completion_channels:
                trouble = _worse(trouble, "stale_reading")
        else:
            value = observed[name] = obs.value
            if channel.webhook and _unsupported(value):
                notes[name] = "api_version_unsupported"
    return Readings(observed, notes, fresh, trouble)


def _worse(trouble: str | None, other: str) -> str | None:
    return other if _TROUBLE_RANK[other] > _TROUBLE_RANK[trouble] else trouble


def _unsupported(value: Any) -> bool:
    """A webhook reduction that says the delivery's API version is not one the skill reads."""
    return bool((type(value) is dict or isinstance(value, Mapping)) and value.get("unsupported"))


def _evaluate(
    compiled: CompiledContract, context: EvaluationContext, notes: Mapping[str, str]
) -> tuple[list[ConditionResult], list[bool | None]]:
    results: list[ConditionResult] = []
    truths: list[bool | None] = []
    note_cache: dict[tuple[str, ...], str | None] = {}
    last_time: Any = NOT_LITERAL
    last_time_plain: Any = None
    for cond in compiled.all_conditions:
        left = cond.path.resolve(context, cond.missing)
        right = cond.literal
        if right is NOT_LITERAL:
            right = cond.operand.resolve(context)
            if type(right) in PLAIN_TYPES:
                expected = right
            elif right is last_time:  # $operation.created_at, read by several conditions
                expected = last_time_plain
            else:
                expected = plain(right)
                if type(right) is datetime:
                    last_time, last_time_plain = right, expected
        else:
            expected = cond.literal_plain
        truth = cond.fn(left, right)
        note = cond.fixed_note
        if cond.gates and truth is True and not all(g.holds(context) for g in cond.gates):
            truth, note = None, "awaiting_gate"
        truths.append(truth)
        if note is None and cond.channel_list:
            key = cond.channel_list
            if key in note_cache:
                note = note_cache[key]
            else:
                found = [notes[name] for name in key if name in notes]
                note = note_cache[key] = ", ".join(found) if found else None
        shown = left if type(left) in PLAIN_TYPES else plain(left)
        results.append(ConditionResult(cond.id, cond.kind, truth, shown, expected, note))
    return results, truths


# -- Phase 2: correlation -----------------------------------------------------------------------


def _correlation(
    compiled: CompiledContract, keys: Mapping[str, Any], *, conflict: bool
) -> Correlation:
    subject_id = keys.get(compiled.subject_key)
    correlated = subject_id is not None and not conflict
    strategies: list[tuple[str, str, Any]] = []
    strong = False
    for strategy, assurance, required, key_names in compiled.strategies:
        values = [keys.get(name) for name in key_names]
        if all(value is not None for value in values):
            value = values[0] if len(values) == 1 else dict(zip(key_names, values, strict=True))
            strategies.append((strategy, assurance, value))
            strong = strong or assurance == "strong"
        elif required:
            correlated = False
    return Correlation(subject_id, correlated and strong, tuple(strategies))


def _uncorrelated(
    compiled: CompiledContract,
    facts: OperationFacts,
    context: EvaluationContext,
    latest: Mapping[str, Observation],
    *,
    conflict: bool,
) -> Outcome:
    """The subject is not known: only a confirmed rejection decides; else wait for it."""
    if conflict:
        return _CORRELATION_CONFLICT
    if not facts.action_rejected:
        return _AWAITING_CORRELATION
    confirmed, checked = _rejection_confirmed(compiled, facts, context, latest)
    if not confirmed:
        return Outcome(
            Verdict.PENDING,
            AWAITING_REJECTION,
            EXPLANATIONS[AWAITING_REJECTION],
            checked=tuple(checked),
        )
    return Outcome(
        Verdict.FAILED,
        ACTION_REJECTED,
        compiled.rejection_reason,
        final=True,
        decided_by=frozenset(compiled.rejection_waits),
        checked=tuple(checked),
    )


def _rejection_confirmed(
    compiled: CompiledContract,
    facts: OperationFacts,
    context: EvaluationContext,
    latest: Mapping[str, Observation],
) -> tuple[bool, list[ConditionResult]]:
    """Is a reported rejection confirmed by independent evidence (``contract.rejection``)?

    Every confirming condition true on its channel's usable reading, and every confirming
    channel read at least its typical latency after the report; the results of the conditions.
    A contract without the section never confirms: the operation waits for its deadline.
    """
    reported = facts.action_reported_at
    checked: list[ConditionResult] = []
    confirmed = bool(compiled.rejection) and reported is not None
    for cond in compiled.rejection:
        left = cond.path.resolve(context, cond.missing)
        right = cond.operand.resolve(context)
        truth = cond.fn(left, right) if cond.allowed else None
        checked.append(
            ConditionResult(cond.id, cond.kind, truth, plain(left), plain(right), cond.fixed_note)
        )
        confirmed = confirmed and truth is True
    for name, wait in compiled.rejection_waits.items():
        obs = latest.get(name)
        if obs is None or name not in context.observed or reported is None:
            return False, checked
        if _utc(obs.observed_at) < _utc(reported) + wait:
            confirmed = False
    return confirmed, checked


# -- Phases 3 to 5: negative conditions, verdict map, completion ---------------------------------


def _negative(compiled: CompiledContract, truths: Sequence[bool | None]) -> Outcome | None:
    for cond in compiled.negative:
        if cond.allowed and truths[cond.index] is True:
            return _contradicted(cond)
    return None


@lru_cache(maxsize=_RULES_CACHED)
def _contradicted(cond: CompiledCondition) -> Outcome:
    return Outcome(
        Verdict.CONTRADICTED,
        cond.id,
        cond.prose,
        final=True,
        class_=cond.class_,
        decided_by=cond.channels,
    )


def _verdict_map(compiled: CompiledContract, truths: Sequence[bool | None]) -> Outcome | None:
    """The first rule that holds; ``None`` when none does or it names no verdict the map gives."""
    for cond in compiled.verdict_map:
        if cond.allowed and truths[cond.index] is True:
            return None if cond.verdict is None else _mapped(cond, cond.verdict)
    return None


@lru_cache(maxsize=_RULES_CACHED)
def _mapped(cond: CompiledCondition, verdict: Verdict) -> Outcome:
    if cond.supersedes:
        # The evidence that supersedes is the rule's own path; what it is compared with
        # (e.g. the newest success event) is the baseline, not new evidence.
        decided_by, supersedes = cond.path_channels, True
    else:
        decided_by, supersedes = cond.channels, False
    return Outcome(
        verdict,
        cond.id,
        cond.prose,
        final=verdict in _FINAL_FROM_MAP,
        supersedes=supersedes,
        decided_by=decided_by,
    )


def _completion(
    compiled: CompiledContract, truths: Sequence[bool | None], readings: Readings
) -> Outcome:
    reason = "awaiting_evidence"
    head = truths[: compiled.completion_count]
    if None not in head and False not in head:
        if _evidence_met(compiled, readings.observed):
            return _verified(compiled)
        reason = "evidence_requirements_not_met"
    trouble = readings.trouble
    if trouble == _UNAVAILABLE_REASON or (trouble is not None and reason == "awaiting_evidence"):
        reason = trouble
    return _WAITING[reason]


@lru_cache(maxsize=_RULES_CACHED)
def _verified(compiled: CompiledContract) -> Outcome:
    return Outcome(
        Verdict.VERIFIED,
        "all_conditions_hold",
        compiled.verified_explanation,
        final=True,
        decided_by=frozenset(ch.name for ch in compiled.evidence_channels),
    )


def _evidence_met(compiled: CompiledContract, observed: Mapping[str, Any]) -> bool:
    present = [ch for ch in compiled.evidence_channels if ch.name in observed]
    for name in compiled.completion_channels:
        if name not in observed:
            return False
    if not present or max(ch.rank for ch in present) < compiled.minimum_rank:
        return False
    if compiled.independent_required and not any(ch.independent for ch in present):
        return False
    return len(present) >= compiled.minimum_channels


# -- Phase 6: timing ----------------------------------------------------------------------------


def _timed_out(compiled: CompiledContract, checked: tuple[ConditionResult, ...]) -> Outcome:
    """The on-timeout verdict, final: what a not-final outcome becomes past the deadline."""
    verdict, reason = compiled.timeout_verdict, compiled.timeout_reason
    escalate = compiled.timeout_escalate
    return Outcome(
        verdict,
        reason,
        f"The deadline passed without the evidence the contract requires; the verdict is "
        f"{verdict.value} ({reason})" + (", for a person to review." if escalate else "."),
        final=True,
        escalate=escalate,
        checked=checked,
    )


# -- The record ---------------------------------------------------------------------------------


def _evidence_row(
    channel: CompiledChannel,
    obs: Observation | None,
    fresh: Mapping[str, bool],
    decided_by: frozenset[str],
) -> EvidenceUsed:
    if obs is None:
        return EvidenceUsed(channel.name, channel.level, "missing", None, fresh=False)
    return EvidenceUsed(
        channel.name,
        channel.level,
        str(obs.status),
        obs.observed_at,
        obs.provider_timestamp,
        obs.digest,
        fresh[channel.name],
        channel.name in decided_by,
    )


def state_after(decision: Decision) -> OperationState:
    """The operation state a decision leads to.

    Not final: PENDING (observation goes on). Final: the verdict's own state, or HUMAN_REVIEW
    when the decision is escalated to a person.
    """
    if not decision.final:
        return OperationState.PENDING
    if decision.escalate:
        return OperationState.HUMAN_REVIEW
    return OperationState(decision.verdict.value)
