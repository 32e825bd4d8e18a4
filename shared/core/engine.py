"""The verdict engine: a pure function from (contract, operation, observations, now) to a verdict.

This module owns :func:`decide`, :func:`state_after` and :func:`deadline_of`. Evaluation order
(DESIGN.md):

0. **A reported rejection** (``facts.action_rejected``: the agent reported an error its provider's
   skill reads as "not performed") while the subject is unknown: FAILED ``action_rejected``
   only when every condition of the contract's ``rejection`` section holds on a usable provider
   reading taken at least the channel's typical latency after the report; else PENDING
   ``awaiting_rejection_confirmation``. The agent's word alone never decides.
1. **Correlation.** The subject identity key (``$correlation.<subject key>``: its expression,
   else a key the operation learned) must be known, every ``required`` strategy's keys must be
   known and at least one strong strategy must be complete. Otherwise PENDING
   ``awaiting_correlation`` (``correlation_conflict`` when the expression and a learned key
   disagree). Nothing else decides before this holds.
2. **Usable readings.** Per declared channel only its latest observation counts (latest
   ``observed_at``; on a tie the first given wins), and only when its status is ``ok`` and its
   age is within the channel's ``freshness_ms`` (else ``timing.stale_read_window_ms``). An
   unusable channel is absent from ``$observed`` and its conditions are unknown.
3. **Negative conditions**: the first that holds gives CONTRADICTED, reason = its id,
   ``class_`` = its class, final.
4. **Verdict map**: the first rule that holds gives its verdict, reason = its id. FAILED and
   CONTRADICTED are final; PENDING and UNVERIFIABLE are not (past the deadline they give way
   to the on-timeout verdict). A rule whose verdict is VERIFIED or EXPIRED is ignored: only
   step 5 verifies.
5. **Completion**: every completion condition true and the evidence requirements met —
   highest level ≥ ``minimum_level`` (never below E2), an independent channel (level ≥ E2
   and an ``independence`` other than none/agent/action response) when required, at least
   ``minimum_channels`` distinct channels of level ≥ E2 — among the channels the completion
   conditions read: VERIFIED ``all_conditions_hold``, final.
6. **Otherwise**: past the deadline (``facts.deadline``, else the action report or creation
   time plus ``timing.timeout_ms``; reached when ``now >= deadline``) the on-timeout verdict,
   final, escalated when ``escalate: human_review`` (an on-timeout verdict of VERIFIED or
   FAILED is read as UNVERIFIABLE: a timeout proves neither). Before it, a channel whose
   latest observation is ``unavailable``/``error`` gives UNVERIFIABLE ``evidence_unavailable``
   (not final); else PENDING ``stale_reading`` / ``evidence_requirements_not_met`` /
   ``awaiting_evidence``.

``facts.attempts`` never ends an operation: polling stops at ``timing.max_attempts`` (see
``schedule``) but callbacks still arrive and decide until the deadline.

The agent is never evidence: a negative condition or verdict-map rule that reads no
``$observed`` channel never decides (its result carries the note ``not_evidence``), and only
channels of level E2 or above count towards the evidence requirements.

Each contract is compiled once (expressions parsed, channels indexed) and cached by identity
(``shared.core.compiled``); the evaluation context and the correlation keys are
``shared.core.context``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from shared.core.compiled import (
    NOT_LITERAL,
    PLAIN_TYPES,
    CompiledChannel,
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
    correlation, conflict = correlation_of(compiled, facts, context)
    context.correlation = correlation

    latest = _latest(compiled, observations)
    observed: dict[str, Any] = {}
    notes: dict[str, str] = {}
    fresh: dict[str, bool] = {}
    unavailable = False
    inconsistent = False
    stale = False
    for channel in compiled.channels:
        name = channel.name
        obs = latest.get(name)
        if obs is None:
            notes[name] = "no_observation"
            continue
        observed_at = obs.observed_at
        if observed_at.tzinfo is None:
            observed_at = observed_at.replace(tzinfo=UTC)
        is_fresh = now - observed_at <= channel.freshness
        fresh[name] = is_fresh
        status = obs.status
        if status != ObservationStatus.OK:
            if status in _UNAVAILABLE:
                unavailable = True
                notes[name] = "channel_unavailable"
            elif status == ObservationStatus.INCONSISTENT:
                inconsistent = True
                notes[name] = "inconsistent_reading"
            else:
                notes[name] = "not_found"
            continue
        if not is_fresh:
            notes[name] = "stale"
            if name in compiled.completion_channels:
                stale = True
            continue
        value = obs.value
        observed[name] = value
        if (
            channel.webhook
            and (type(value) is dict or isinstance(value, Mapping))
            and value.get("unsupported")
        ):
            notes[name] = "api_version_unsupported"
    context.observed = observed

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
        results.append(
            ConditionResult(
                cond.id,
                cond.kind,
                truth,
                left if type(left) in PLAIN_TYPES else plain(left),
                expected,
                note,
            )
        )

    subject_id = correlation.get(compiled.subject_key)
    correlated = subject_id is not None and not conflict
    strategies: list[tuple[str, str, Any]] = []
    strong = False
    for strategy, assurance, required, key_names in compiled.strategies:
        values = [correlation.get(name) for name in key_names]
        complete = all(value is not None for value in values)
        if complete:
            strategies.append(
                (
                    strategy,
                    assurance,
                    values[0] if len(values) == 1 else dict(zip(key_names, values, strict=True)),
                )
            )
            strong = strong or assurance == "strong"
        elif required:
            correlated = False
    correlated = correlated and strong

    past_deadline = now >= _deadline(compiled, facts)
    verdict: Verdict
    reason: str
    class_: str | None = None
    final = False
    escalate = False
    supersedes = False
    explanation: str | None
    decided_by: frozenset[str] = frozenset()

    if not correlated and facts.action_rejected and not conflict:
        confirmed, checked = _rejection_confirmed(compiled, facts, context, latest)
        results.extend(checked)
        if confirmed:
            verdict, reason, final = Verdict.FAILED, ACTION_REJECTED, True
            explanation = compiled.rejection_reason
            decided_by = frozenset(compiled.rejection_waits)
        else:
            verdict, reason = Verdict.PENDING, AWAITING_REJECTION
            explanation = EXPLANATIONS[reason]
    elif not correlated:
        verdict, reason = (
            Verdict.PENDING,
            ("correlation_conflict" if conflict else "awaiting_correlation"),
        )
        explanation = EXPLANATIONS[reason]
    else:
        chosen = None
        for cond in compiled.negative:
            if cond.allowed and truths[cond.index] is True:
                chosen = cond
                break
        if chosen is not None:
            verdict, reason, class_, final = Verdict.CONTRADICTED, chosen.id, chosen.class_, True
            explanation = chosen.prose
            decided_by = chosen.channels
        else:
            for cond in compiled.verdict_map:
                if cond.allowed and truths[cond.index] is True:
                    chosen = cond
                    break
            if chosen is not None and chosen.verdict is not None:
                verdict, reason = chosen.verdict, chosen.id
                final = verdict in _FINAL_FROM_MAP
                explanation = chosen.prose
                decided_by = chosen.channels
                if chosen.supersedes:
                    # The evidence that supersedes is the rule's own path; what it is compared
                    # with (e.g. the newest success event) is the baseline, not new evidence.
                    supersedes, decided_by = True, chosen.path_channels
            else:
                verdict, reason = Verdict.PENDING, "awaiting_evidence"
                explanation = None
                head = truths[: compiled.completion_count]
                if None not in head and False not in head:
                    if _evidence_met(compiled, observed):
                        verdict, reason, final = Verdict.VERIFIED, "all_conditions_hold", True
                        explanation = compiled.verified_explanation
                        decided_by = frozenset(ch.name for ch in compiled.evidence_channels)
                    else:
                        reason = "evidence_requirements_not_met"
                if verdict is Verdict.PENDING:
                    if unavailable:
                        verdict, reason = Verdict.UNVERIFIABLE, "evidence_unavailable"
                    elif inconsistent and reason == "awaiting_evidence":
                        reason = "inconsistent_reading"
                    elif stale and reason == "awaiting_evidence":
                        reason = "stale_reading"
                    explanation = EXPLANATIONS[reason]

    if not final and past_deadline:
        verdict, reason, final = compiled.timeout_verdict, compiled.timeout_reason, True
        escalate = compiled.timeout_escalate
        supersedes = False
        explanation = (
            f"The deadline passed without the evidence the contract requires; the verdict is "
            f"{verdict.value} ({reason})" + (", for a person to review." if escalate else ".")
        )
        decided_by = frozenset()

    evidence = tuple(
        [
            _evidence_row(channel, latest.get(channel.name), fresh, decided_by)
            for channel in compiled.channels
        ]
    )
    return Decision(
        verdict=verdict,
        reason=reason,
        class_=class_,
        final=final,
        conditions=tuple(results),
        evidence=evidence,
        correlation=tuple(strategies),
        subject_id=subject_id,
        escalate=escalate,
        explanation=explanation,
        supersedes=supersedes,
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
