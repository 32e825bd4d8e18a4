"""The correlation keys of an operation, read by every path that links events with
operations: its idempotency value (the contract's ``idempotency_key`` strategy), its subject
values (its subject id, the subject id it learned, its ``resource_id`` strategy keys from its
input or result or learned keys), its fingerprint (every key of the contract's ``fingerprint``
strategy, else none), and whether an event type names the contract's subject. A strong link
(``STRONG``) is by idempotency key or resource id; a fingerprint link is weak (``WEAK``) and
never verifies.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from shared.core.contract import Contract
from shared.intake.contracts import _of_contract
from shared.intake.parse import _MAX_KEY_VALUE, _expression, _text, _walk

__all__ = ["STRONG", "WEAK"]

STRONG: Final = "strong"
WEAK: Final = "weak"


def _strategy_keys(contract: Contract, strategy: str) -> tuple[tuple[str, str], ...]:
    """(name, expression) of the keys of the contract's correlation strategy ``strategy``."""
    keys: tuple[tuple[str, str], ...] = _of_contract(
        contract,
        strategy,
        lambda: tuple(
            (key.name, key.expr)
            for s in contract.correlation
            if s.strategy == strategy
            for key in s.keys
        ),
    )
    return keys


class _OperationKeys(Protocol):
    """What the key helpers below read of an operation: an ``Operation``, or a row of
    ``_CORRELATION_COLUMNS`` (the batched correlation reads plain rows, not tracked objects)."""

    @property
    def id(self) -> str: ...
    @property
    def input(self) -> Any: ...
    @property
    def action_result(self) -> Any: ...
    @property
    def subject_id(self) -> str | None: ...
    @property
    def learned_keys(self) -> Any: ...


def _operation_value(operation: _OperationKeys, expr: str) -> str | None:
    """The value of a correlation key expression for an operation (``$operation.id``,
    ``$input.*``, ``$action.result.*``); None when unknown."""
    root, parts = _expression(expr)
    if expr == "$operation.id":
        return operation.id
    if root == "$input":
        return _text(_walk(operation.input or {}, parts), _MAX_KEY_VALUE)
    if root == "$action" and parts[:1] == ("result",):
        return _text(_walk(operation.action_result or {}, parts[1:]), _MAX_KEY_VALUE)
    return None


def _idempotency_value(contract: Contract, operation: _OperationKeys) -> str | None:
    for _name, expr in _strategy_keys(contract, "idempotency_key"):
        value = _operation_value(operation, expr)
        if value is not None:
            return value
    return None


def _fingerprint(contract: Contract, operation: _OperationKeys) -> dict[str, str] | None:
    keys = _strategy_keys(contract, "fingerprint")
    if not keys:
        return None
    values = {name: _operation_value(operation, expr) for name, expr in keys}
    if any(v is None for v in values.values()):
        return None
    return {k: v for k, v in values.items() if v is not None}


def _subject_values(operation: _OperationKeys, contract: Contract) -> set[str]:
    values = set()
    if operation.subject_id:
        values.add(operation.subject_id)
    learned = (operation.learned_keys or {}).get(contract.subject.identity.key)
    if isinstance(learned, str) and learned:
        values.add(learned)
    for name, expr in _strategy_keys(contract, "resource_id"):
        value = _operation_value(operation, expr) or _text(
            (operation.learned_keys or {}).get(name), _MAX_KEY_VALUE
        )
        if value is not None:
            values.add(value)
    return values


def _of_subject_type(contract: Contract, event_type: str) -> bool:
    """True when an event type names the subject's object (``refund.created`` for
    ``stripe.refund``)."""
    return event_type.split(".")[0] == contract.subject.type.split(".")[-1]
