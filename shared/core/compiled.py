"""A contract compiled for the verdict engine: expressions parsed, channels indexed.

:func:`compiled_contract` compiles each contract once and caches it by identity; the engine
(``shared.core.engine``) and the evaluation context (``shared.core.context``) read the
compiled form. :func:`plain` is how the record shows a condition's operands.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
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
from shared.core.types import Verdict
from shared.core.verifiers import verifier_of

__all__ = [
    "NOT_LITERAL",
    "PLAIN_TYPES",
    "CompiledChannel",
    "CompiledCondition",
    "CompiledContract",
    "compiled_contract",
    "plain",
]

_LEVEL_RANK: Final = {"E1": 1, "E2": 2, "E3": 3, "E4": 4}
_EVIDENCE_FLOOR: Final = 2  # E2: the action response (E1) never verifies
_NOT_IN_MAP: Final = frozenset({Verdict.VERIFIED, Verdict.EXPIRED})
_NOT_ON_TIMEOUT: Final = frozenset({Verdict.VERIFIED, Verdict.FAILED})
NOT_LITERAL: Final = object()


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


class CompiledCondition:
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
        "path_channels",
        "prose",
        "supersedes",
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
        supersedes: bool = False,
    ) -> None:
        self.id = id
        self.supersedes = supersedes
        # A gated condition is judged only once every gate holds; until then it is unknown.
        self.gates = tuple(_Gate(path, op, value) for path, op, value in gates)
        self.kind = kind
        self.path: Expression = compile_expression(path)
        self.op = op
        self.fn = operator_function(op)
        self.operand: Operand = compile_operand(value)
        self.index = 0  # position in the compiled contract's list of all conditions
        self.literal: Any = (
            self.operand.value if isinstance(self.operand, LiteralOperand) else NOT_LITERAL
        )
        self.literal_plain: Any = plain(self.literal)
        self.prose = prose
        self.class_ = class_
        self.verdict = verdict
        self.evidence = evidence
        self.missing: Any = None if op is Operator.EXISTS else UNKNOWN
        channels = {self.path.channel} | _operand_channels(self.operand)
        channels.discard(None)
        self.channels: frozenset[str] = frozenset(c for c in channels if c is not None)
        self.channel_list = tuple(sorted(self.channels))
        path_channel = self.path.channel
        self.path_channels: frozenset[str] = frozenset(
            () if path_channel is None else (path_channel,)
        )
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


class CompiledChannel:
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
) -> tuple[CompiledCondition, ...]:
    """Conditions of the completion shape (``id, meaning, path, op, value, evidence``)."""
    return tuple(
        CompiledCondition(
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


class CompiledContract:
    """A contract made ready for fast evaluation."""

    def __init__(self, contract: Contract) -> None:
        timing = contract.timing
        self.contract = contract
        self.channels = tuple(
            CompiledChannel(
                ch.name,
                ch.level,
                ch.independence,
                timedelta(
                    milliseconds=ch.freshness_ms
                    if ch.freshness_ms is not None
                    else timing.stale_read_window_ms
                ),
                verifier_of(ch).reduces_events,
            )
            for ch in contract.channels
        )
        self.channel_by_name = {ch.name: ch for ch in self.channels}
        self.completion = _evidence_conditions("completion", contract.completion)
        self.negative = tuple(
            CompiledCondition(
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
            CompiledCondition(
                id=r.id,
                kind="verdict_map",
                path=r.path,
                op=r.op,
                value=r.value,
                prose=r.reason,
                verdict=Verdict(r.verdict),
                gates=[(g.path, g.op, g.value) for g in r.when],
                supersedes=r.supersedes_verified,
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
_cache: dict[int, tuple[Contract, CompiledContract]] = {}


def compiled_contract(contract: Contract) -> CompiledContract:
    """The compiled form of ``contract``, cached by object identity (the cache holds the
    contract, so its id cannot be reused while the entry lives)."""
    entry = _cache.get(id(contract))
    if entry is not None and entry[0] is contract:
        return entry[1]
    compiled = CompiledContract(contract)
    if len(_cache) >= _CACHE_SIZE:
        _cache.pop(next(iter(_cache), 0), None)  # oldest first; tolerate a racing evict
    _cache[id(contract)] = (contract, compiled)
    return compiled


PLAIN_TYPES: Final = frozenset({str, int, float, bool, type(None), dict})


def plain(value: Any) -> Any:
    """A condition operand as the record shows it: UNKNOWN is null, times are ISO-8601."""
    if type(value) in PLAIN_TYPES:
        return value
    if value is UNKNOWN:
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value
