"""The correlation rules: which key links an event to which operation, and how strongly.

Written once, for every path that links events with operations: one event at a time
(``shared.intake.correlate.correlate_event``), a set of stored events at once
(``shared.intake.batch``, set-based statements on PostgreSQL), and from the operation's side
(``shared.intake.correlate.correlate_pending_events``, which looks events up by the same keys).

- An operation's keys (:func:`operation_keys`): its idempotency value (the contract's
  ``idempotency_key`` strategy), its subject values (its subject id, the subject id it learned,
  its ``resource_id`` strategy keys from its input or result or learned keys) and, for an open
  operation without a subject id only, its fingerprint (every key of the contract's
  ``fingerprint`` strategy, else none).
- :func:`match` decides for one event and one operation of a provider the contract reads:
  ``idempotency_key`` (strong) when the event carries the operation's idempotency value as its
  idempotency key — and the operation, without a subject id yet, learns the event's object id
  when the event is of the subject's type (``learns``); else ``resource_id`` (strong) when the
  event's object id is one of its subject values; else ``fingerprint`` (weak) when the event
  carries every fingerprint key name of its provider (:func:`fingerprinted`) and every key of
  the operation's fingerprint equals the event's. A weak link never verifies: the engine only
  decides once the subject is strongly correlated.
- :func:`fingerprint_probe` names the fingerprint key a query narrows the weak candidates on.

What a link wakes is the results' (``shared.intake.results.IntakeResult.to_wake``): a strong
link to an open operation; a link to a final operation is late evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Protocol

from shared.core.contract import Contract
from shared.intake.contracts import derived_of_contract, event_providers, fingerprint_key_names
from shared.intake.parse import (
    MAX_KEY_VALUE,
    ParsedEvent,
    bounded_text,
    split_expression,
    walk_path,
)

__all__ = [
    "STRONG",
    "WEAK",
    "Match",
    "OperationKeys",
    "fingerprint_probe",
    "fingerprinted",
    "match",
    "operation_keys",
]

STRONG: Final = "strong"
WEAK: Final = "weak"


def _strategy_keys(contract: Contract, strategy: str) -> tuple[tuple[str, str], ...]:
    """(name, expression) of the keys of the contract's correlation strategy ``strategy``."""
    keys: tuple[tuple[str, str], ...] = derived_of_contract(
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
    """What the key helpers below read of an operation: an ``Operation``, or the decoded
    documents of a candidate row (``shared.intake.batch`` reads plain rows, not tracked
    objects)."""

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
    root, parts = split_expression(expr)
    if expr == "$operation.id":
        return operation.id
    if root == "$input":
        return bounded_text(walk_path(operation.input or {}, parts), MAX_KEY_VALUE)
    if root == "$action" and parts[:1] == ("result",):
        return bounded_text(walk_path(operation.action_result or {}, parts[1:]), MAX_KEY_VALUE)
    return None


def idempotency_value(contract: Contract, operation: _OperationKeys) -> str | None:
    for _name, expr in _strategy_keys(contract, "idempotency_key"):
        value = _operation_value(operation, expr)
        if value is not None:
            return value
    return None


def fingerprint_of(contract: Contract, operation: _OperationKeys) -> dict[str, str] | None:
    keys = _strategy_keys(contract, "fingerprint")
    if not keys:
        return None
    values = {name: _operation_value(operation, expr) for name, expr in keys}
    if any(v is None for v in values.values()):
        return None
    return {k: v for k, v in values.items() if v is not None}


def subject_values(operation: _OperationKeys, contract: Contract) -> set[str]:
    values = set()
    if operation.subject_id:
        values.add(operation.subject_id)
    learned = (operation.learned_keys or {}).get(contract.subject.identity.key)
    if isinstance(learned, str) and learned:
        values.add(learned)
    for name, expr in _strategy_keys(contract, "resource_id"):
        value = _operation_value(operation, expr) or bounded_text(
            (operation.learned_keys or {}).get(name), MAX_KEY_VALUE
        )
        if value is not None:
            values.add(value)
    return values


def of_subject_type(contract: Contract, event_type: str) -> bool:
    """True when an event type names the subject's object (``refund.created`` for
    ``stripe.refund``)."""
    return event_type.split(".")[0] == contract.subject.type.split(".")[-1]


@dataclass(frozen=True, slots=True)
class OperationKeys:
    """What events can link an operation by (:func:`operation_keys`), derived once."""

    contract: Contract
    providers: frozenset[str]
    idempotency: str | None
    subjects: frozenset[str]
    fingerprint: dict[str, str] | None  # an open operation without a subject id only
    subject_id: str | None


def operation_keys(contract: Contract, operation: _OperationKeys, *, final: bool) -> OperationKeys:
    """Providers, idempotency value, subject values and (an operation without a subject id,
    still open) fingerprint of an operation bound to ``contract``."""
    return OperationKeys(
        contract,
        derived_of_contract(contract, "providers", partial(event_providers, contract)),
        idempotency_value(contract, operation),
        frozenset(subject_values(operation, contract)),
        fingerprint_of(contract, operation) if operation.subject_id is None and not final else None,
        operation.subject_id,
    )


@dataclass(frozen=True, slots=True)
class Match:
    """How an event links an operation: the strategy, its assurance, and whether the operation
    learns its subject id (the event's object id) from the event."""

    strategy: str
    assurance: str
    learns: bool = False


BY_IDEMPOTENCY_KEY: Final = Match("idempotency_key", STRONG)
BY_IDEMPOTENCY_KEY_LEARNING: Final = Match("idempotency_key", STRONG, learns=True)
BY_RESOURCE_ID: Final = Match("resource_id", STRONG)
BY_FINGERPRINT: Final = Match("fingerprint", WEAK)


def fingerprinted(provider: str, keys: Mapping[str, str]) -> bool:
    """True when an event carries every fingerprint key name of its provider's contracts (only
    such an event links weakly)."""
    names = fingerprint_key_names(provider)
    return bool(names) and names <= set(keys)


def fingerprint_probe(provider: str, keys: Mapping[str, str]) -> str | None:
    """The fingerprint key a query narrows an event's weak candidates on (a value that is not a
    number first, then by name), or None when the event is not :func:`fingerprinted`."""
    names = fingerprint_key_names(provider)
    if not names or not names <= set(keys):
        return None
    return min(names, key=lambda n: (keys[n].lstrip("-").isdigit(), n))


def match(
    event: ParsedEvent, provider: str, keys: OperationKeys, *, fingerprinted: bool
) -> Match | None:
    """How ``event`` (from ``provider``) links the operation of ``keys``, or None.
    ``fingerprinted`` is :func:`fingerprinted` of the event (worked out once per event)."""
    if provider not in keys.providers:
        return None
    if event.idempotency_key is not None and event.idempotency_key == keys.idempotency:
        if (
            keys.subject_id is None
            and event.object_id is not None
            and of_subject_type(keys.contract, event.type)
        ):
            return BY_IDEMPOTENCY_KEY_LEARNING
        return BY_IDEMPOTENCY_KEY
    if event.object_id is not None and event.object_id in keys.subjects:
        return BY_RESOURCE_ID
    fingerprint = keys.fingerprint
    if (
        fingerprinted
        and fingerprint
        and all(event.keys.get(k) == v for k, v in fingerprint.items())
    ):
        return BY_FINGERPRINT
    return None
