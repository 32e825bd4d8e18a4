"""The verdict engine: a pure function from (contract, operation, observations, now) to a verdict.

This module owns :func:`decide` and :func:`state_after`. Evaluation order (DESIGN.md):

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

Each contract is compiled once (expressions parsed, channels indexed) and cached by identity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from shared.core.contract import CompletionCondition, Contract, Operator
from shared.core.expressions import (
    UNKNOWN,
    EvaluationContext,
    Expression,
    LiteralOperand,
    Operand,
    compile_expression,
    compile_operand,
)
from shared.core.operators import operator_function
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
    "EXPLANATIONS",
    "build_context",
    "correlation_keys",
    "deadline_of",
    "decide",
    "state_after",
]

_LEVEL_RANK: Final = {"E1": 1, "E2": 2, "E3": 3, "E4": 4}
_EVIDENCE_FLOOR: Final = 2  # E2: the action response (E1) never verifies
_FINAL_FROM_MAP: Final = frozenset({Verdict.FAILED, Verdict.CONTRADICTED})
_NOT_IN_MAP: Final = frozenset({Verdict.VERIFIED, Verdict.EXPIRED})
_NOT_ON_TIMEOUT: Final = frozenset({Verdict.VERIFIED, Verdict.FAILED})
_NOT_LITERAL: Final = object()
_UNAVAILABLE: Final = frozenset({ObservationStatus.UNAVAILABLE, ObservationStatus.ERROR})

EXPLANATIONS: Final[Mapping[str, str]] = {
    "awaiting_correlation": (
        "The subject of the operation is not known yet, so no evidence can be tied to it."
    ),
    "correlation_conflict": (
        "The reported subject and the one learned from the provider differ; nothing decides."
    ),
    "awaiting_evidence": "The evidence the contract asks for has not arrived yet.",
    "stale_reading": "The latest reading is older than the freshness window and cannot decide.",
    "evidence_requirements_not_met": (
        "The conditions hold, but not on evidence of the level and independence required."
    ),
    "evidence_unavailable": (
        "A channel could not answer; the runtime observes again and a later reading decides."
    ),
    "awaiting_rejection_confirmation": (
        "The agent reported that the provider refused the action; that is its word alone, so "
        "the runtime observes until independent evidence confirms nothing was created."
    ),
}

ACTION_REJECTED: Final = "action_rejected"
AWAITING_REJECTION: Final = "awaiting_rejection_confirmation"


class _Gate:
    """One ``when`` rule of a negative condition or verdict-map rule."""

    __slots__ = ("fn", "missing", "operand", "path")

    def __init__(self, path: str, op: Operator, value: Any) -> None:
        self.path: Expression = compile_expression(path)
        self.fn = operator_function(op)
        self.operand: Operand = compile_operand(value)
        self.missing: Any = None if op is Operator.EXISTS else UNKNOWN

    def holds(self, context: EvaluationContext) -> bool:
        left = self.path.resolve(context, self.missing)
        return self.fn(left, self.operand.resolve(context)) is True


class _Condition:
    __slots__ = (
        "allowed",
        "channel_list",
        "channels",
        "class_",
        "evidence",
        "fixed_note",
        "fn",
        "gates",
        "id",
        "index",
        "kind",
        "literal",
        "literal_plain",
        "missing",
        "op",
        "operand",
        "path",
        "prose",
        "verdict",
    )

    def __init__(
        self,
        *,
        id: str,
        kind: str,
        path: str,
        op: Operator,
        value: Any,
        prose: str | None = None,
        class_: str | None = None,
        verdict: Verdict | None = None,
        evidence: str | None = None,
        gates: Sequence[tuple[str, Operator, Any]] = (),
    ) -> None:
        self.id = id
        # A gated condition is judged only once every gate holds; until then it is unknown.
        self.gates = tuple(_Gate(path, op, value) for path, op, value in gates)
        self.kind = kind
        self.path: Expression = compile_expression(path)
        self.op = op
        self.fn = operator_function(op)
        self.operand: Operand = compile_operand(value)
        self.index = 0  # position in the compiled contract's list of all conditions
        self.literal: Any = (
            self.operand.value if isinstance(self.operand, LiteralOperand) else _NOT_LITERAL
        )
        self.literal_plain: Any = _plain(self.literal)
        self.prose = prose
        self.class_ = class_
        self.verdict = verdict
        self.evidence = evidence
        self.missing: Any = None if op is Operator.EXISTS else UNKNOWN
        channels = {self.path.channel} | _operand_channels(self.operand)
        channels.discard(None)
        self.channels: frozenset[str] = frozenset(c for c in channels if c is not None)
        self.channel_list = tuple(sorted(self.channels))
        self.fixed_note: str | None = None
        if not self.channels and kind != "completion":
            self.fixed_note = "not_evidence"
        elif verdict in _NOT_IN_MAP:
            self.fixed_note = "verdict_not_allowed_in_map"
        # Only a condition that reads a provider channel may decide; the agent is no evidence.
        self.allowed = bool(self.channels) and verdict not in _NOT_IN_MAP


def _operand_channels(operand: Operand) -> set[str | None]:
    if isinstance(operand, Expression):
        return {operand.channel}
    items = getattr(operand, "items", ())
    found: set[str | None] = set()
    for item in items:
        found |= _operand_channels(item)
    return found


_NOT_INDEPENDENT: Final = frozenset({"", "none", "agent", "action response"})


class _Channel:
    __slots__ = ("freshness", "independent", "level", "name", "rank", "webhook")

    def __init__(
        self, name: str, level: str, independence: str, freshness: timedelta, webhook: bool
    ) -> None:
        self.name = name
        self.level = level
        self.rank = _LEVEL_RANK[level]
        self.freshness = freshness
        self.webhook = webhook
        # E1 is the agent's own report; a channel that says it is not independent is not.
        self.independent = (
            self.rank >= _EVIDENCE_FLOOR and independence.strip().lower() not in _NOT_INDEPENDENT
        )


def _evidence_conditions(
    kind: str, conditions: Sequence[CompletionCondition]
) -> tuple[_Condition, ...]:
    """Conditions of the completion shape (``id, meaning, path, op, value, evidence``)."""
    return tuple(
        _Condition(
            id=c.id,
            kind=kind,
            path=c.path,
            op=c.op,
            value=c.value,
            prose=c.meaning,
            evidence=c.evidence,
        )
        for c in conditions
    )


class _Compiled:
    """A contract made ready for fast evaluation."""

    def __init__(self, contract: Contract) -> None:
        timing = contract.timing
        self.contract = contract
        self.channels = tuple(
            _Channel(
                ch.name,
                ch.level,
                ch.independence,
                timedelta(
                    milliseconds=ch.freshness_ms
                    if ch.freshness_ms is not None
                    else timing.stale_read_window_ms
                ),
                ch.verifier == "webhook",
            )
            for ch in contract.channels
        )
        self.channel_by_name = {ch.name: ch for ch in self.channels}
        self.completion = _evidence_conditions("completion", contract.completion)
        self.negative = tuple(
            _Condition(
                id=c.id,
                kind="negative",
                path=c.path,
                op=c.op,
                value=c.value,
                prose=c.reason,
                class_=c.class_,
                gates=[(g.path, g.op, g.value) for g in c.when],
            )
            for c in contract.negative
        )
        self.verdict_map = tuple(
            _Condition(
                id=r.id,
                kind="verdict_map",
                path=r.path,
                op=r.op,
                value=r.value,
                prose=r.reason,
                verdict=Verdict(r.verdict),
                gates=[(g.path, g.op, g.value) for g in r.when],
            )
            for r in contract.verdict_map
        )
        self.all_conditions = self.completion + self.negative + self.verdict_map
        rejection = contract.rejection
        self.rejection_reason = rejection.reason if rejection is not None else None
        self.rejection = _evidence_conditions(
            "rejection", rejection.confirm if rejection is not None else ()
        )
        latency = {ch.name: ch.typical_latency_ms or 0 for ch in contract.channels}
        # Each confirming channel is read at least its typical latency after the report.
        self.rejection_waits = {
            name: timedelta(milliseconds=latency.get(name, 0))
            for cond in self.rejection
            for name in cond.channels | {cond.evidence or ""}
            if name in latency
        }
        self.completion_count = len(self.completion)
        for index, cond in enumerate(self.all_conditions):
            cond.index = index
        completion_channels: set[str] = set()
        for cond in self.completion:
            completion_channels |= cond.channels
        completion_channels.update(c.evidence for c in contract.completion)
        self.completion_channels = frozenset(completion_channels)
        self.evidence_channels = tuple(
            self.channel_by_name[name]
            for name in sorted(completion_channels)
            if name in self.channel_by_name and self.channel_by_name[name].rank >= _EVIDENCE_FLOOR
        )
        requirements = contract.evidence
        self.minimum_rank = max(_LEVEL_RANK[requirements.minimum_level], _EVIDENCE_FLOOR)
        self.independent_required = requirements.independent_channel_required
        self.minimum_channels = requirements.minimum_channels
        self.subject_key = contract.subject.identity.key
        keys: dict[str, Expression] = {
            self.subject_key: compile_expression(contract.subject.identity.expr)
        }
        for strategy in contract.correlation:
            for key in strategy.keys:
                keys.setdefault(key.name, compile_expression(key.expr))
        self.key_expressions = tuple(keys.items())
        self.strategies = tuple(
            (s.strategy, s.assurance, s.required, tuple(k.name for k in s.keys))
            for s in contract.correlation
        )
        self.timeout = timedelta(milliseconds=timing.timeout_ms)
        on_timeout = Verdict(timing.on_timeout.verdict)
        self.timeout_verdict = Verdict.UNVERIFIABLE if on_timeout in _NOT_ON_TIMEOUT else on_timeout
        self.timeout_reason = timing.on_timeout.reason
        self.timeout_escalate = timing.on_timeout.escalate == "human_review"
        self.verified_explanation = (
            f"Every completion condition holds on fresh provider evidence; this proves the "
            f"'{contract.completion_level}' level of {contract.id} {contract.version}."
        )


_CACHE_SIZE: Final = 128
_cache: dict[int, tuple[Contract, _Compiled]] = {}


def _compiled(contract: Contract) -> _Compiled:
    """The compiled form of ``contract``, cached by object identity (the cache holds the
    contract, so its id cannot be reused while the entry lives)."""
    entry = _cache.get(id(contract))
    if entry is not None and entry[0] is contract:
        return entry[1]
    compiled = _Compiled(contract)
    if len(_cache) >= _CACHE_SIZE:
        _cache.pop(next(iter(_cache), 0), None)  # oldest first; tolerate a racing evict
    _cache[id(contract)] = (contract, compiled)
    return compiled


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _usable_key(value: Any) -> bool:
    kind = type(value)
    if kind is str:
        return bool(value)
    if kind is int:
        return True
    if isinstance(value, str):
        return bool(value)
    return isinstance(value, int) and not isinstance(value, bool)


_PLAIN_TYPES: Final = frozenset({str, int, float, bool, type(None), dict})


def _plain(value: Any) -> Any:
    """A condition operand as the record shows it: UNKNOWN is null, times are ISO-8601."""
    if type(value) in _PLAIN_TYPES:
        return value
    if value is UNKNOWN:
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def correlation_keys(contract: Contract, facts: OperationFacts) -> dict[str, Any]:
    """The operation's correlation keys: each key's expression, else what it learned later.

    A key whose expression and learned value disagree is left out (the conflict is reported
    by :func:`decide` as ``correlation_conflict``).
    """
    keys, _ = _correlation(_compiled(contract), facts, _base_context(facts))
    return keys


def _base_context(facts: OperationFacts) -> EvaluationContext:
    return EvaluationContext(
        input=facts.input,
        action_result=facts.action_result,
        operation_id=facts.id,
        operation_created_at=facts.created_at,
    )


def _correlation(
    compiled: _Compiled, facts: OperationFacts, context: EvaluationContext
) -> tuple[dict[str, Any], bool]:
    learned = facts.learned_keys
    keys: dict[str, Any] = {k: v for k, v in learned.items() if _usable_key(v)}
    conflict = False
    for name, expr in compiled.key_expressions:
        value = expr.resolve(context)
        if not _usable_key(value):
            continue
        known = keys.get(name)
        if known is not None and known != value:
            conflict = True
            del keys[name]
            continue
        keys[name] = value
    return keys, conflict


def build_context(
    contract: Contract,
    facts: OperationFacts,
    observed: Mapping[str, Any] | None = None,
) -> EvaluationContext:
    """The evaluation context of an operation, as the observer needs it to fill a readback
    path or reduce events (``$correlation``, ``$input``, ``$operation`` …)."""
    context = _base_context(facts)
    context.correlation, _ = _correlation(_compiled(contract), facts, context)
    if observed is not None:
        context.observed = observed
    return context


def deadline_of(contract: Contract, facts: OperationFacts) -> datetime:
    """``facts.deadline``, else the action report (or creation) time plus the timeout."""
    return _deadline(_compiled(contract), facts)


def _deadline(compiled: _Compiled, facts: OperationFacts) -> datetime:
    if facts.deadline is not None:
        return _utc(facts.deadline)
    start = facts.action_reported_at or facts.created_at
    return _utc(start) + compiled.timeout


def _latest(compiled: _Compiled, observations: Iterable[Observation]) -> dict[str, Observation]:
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
    compiled = _compiled(contract)
    now = _utc(now)
    context = _base_context(facts)
    correlation, conflict = _correlation(compiled, facts, context)
    context.correlation = correlation

    latest = _latest(compiled, observations)
    observed: dict[str, Any] = {}
    notes: dict[str, str] = {}
    fresh: dict[str, bool] = {}
    unavailable = False
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
    last_time: Any = _NOT_LITERAL
    last_time_plain: Any = None
    for cond in compiled.all_conditions:
        left = cond.path.resolve(context, cond.missing)
        right = cond.literal
        if right is _NOT_LITERAL:
            right = cond.operand.resolve(context)
            if type(right) in _PLAIN_TYPES:
                expected = right
            elif right is last_time:  # $operation.created_at, read by several conditions
                expected = last_time_plain
            else:
                expected = _plain(right)
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
                left if type(left) in _PLAIN_TYPES else _plain(left),
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
                    elif stale and reason == "awaiting_evidence":
                        reason = "stale_reading"
                    explanation = EXPLANATIONS[reason]

    if not final and past_deadline:
        verdict, reason, final = compiled.timeout_verdict, compiled.timeout_reason, True
        escalate = compiled.timeout_escalate
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
    )


def _rejection_confirmed(
    compiled: _Compiled,
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
            ConditionResult(cond.id, cond.kind, truth, _plain(left), _plain(right), cond.fixed_note)
        )
        confirmed = confirmed and truth is True
    for name, wait in compiled.rejection_waits.items():
        obs = latest.get(name)
        if obs is None or name not in context.observed or reported is None:
            return False, checked
        if _utc(obs.observed_at) < _utc(reported) + wait:
            confirmed = False
    return confirmed, checked


def _evidence_met(compiled: _Compiled, observed: Mapping[str, Any]) -> bool:
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
    channel: _Channel,
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
