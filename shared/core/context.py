"""An operation's evaluation context: its correlation keys and what its expressions read.

The correlation keys are each key's expression, else what the operation learned later; the
context (``$input``, ``$action``, ``$operation``, ``$correlation``, ``$observed``) is what the
engine evaluates a contract in, and what the observer fills a readback path with or reduces
events in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.core.compiled import CompiledContract, compiled_contract
from shared.core.contract import Contract
from shared.core.expressions import EvaluationContext
from shared.core.types import OperationFacts

__all__ = [
    "base_context",
    "build_context",
    "correlation_keys",
    "correlation_of",
]


def _usable_key(value: Any) -> bool:
    kind = type(value)
    if kind is str:
        return bool(value)
    if kind is int:
        return True
    if isinstance(value, str):
        return bool(value)
    return isinstance(value, int) and not isinstance(value, bool)


def correlation_keys(contract: Contract, facts: OperationFacts) -> dict[str, Any]:
    """The operation's correlation keys: each key's expression, else what it learned later.

    A key whose expression and learned value disagree is left out (the conflict is reported
    by :func:`shared.core.engine.decide` as ``correlation_conflict``).
    """
    keys, _ = correlation_of(compiled_contract(contract), facts, base_context(facts))
    return keys


def base_context(facts: OperationFacts) -> EvaluationContext:
    """The context of ``facts`` before correlation and observation: input, action, operation."""
    return EvaluationContext(
        input=facts.input,
        action_result=facts.action_result,
        operation_id=facts.id,
        operation_created_at=facts.created_at,
    )


def correlation_of(
    compiled: CompiledContract, facts: OperationFacts, context: EvaluationContext
) -> tuple[dict[str, Any], bool]:
    """The usable correlation keys, and whether an expression and a learned key disagree."""
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
    context = base_context(facts)
    context.correlation, _ = correlation_of(compiled_contract(contract), facts, context)
    if observed is not None:
        context.observed = observed
    return context
