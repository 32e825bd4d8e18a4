"""Operations in the record: the one write of an operation's state.

:func:`change_state` checks the core's lifecycle table, then writes the new state with
``UPDATE operations … WHERE id = :id AND version = :v AND state = :current``, bumps the
version, issues the receipt when its caller asks for one (``receipt=True``, only with a final
verdict), and appends the transition to the workspace's audit chain last (its lock is held until
commit) — all in the caller's transaction. It returns None when another writer got there first;
the caller re-reads the operation and decides again. A move that passes through a state it never
commits (``through``, a :class:`Passage`) is still one UPDATE, with a transition row for each
step. It is called only by the named steps of
``shared.lifecycle.steps``, which say which moves exist and which of them issue a receipt.

Also: :func:`facts_for` (what the engine needs besides observations) and
:func:`decision_document` (a decision as the JSON stored on the operation). The contract an
operation is bound to is found by ``shared.lifecycle.contracts``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, cast

from sqlalchemy import Table, bindparam, event, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from shared.core.shown import shown_expected, shown_value
from shared.core.state_machine import is_final, transition
from shared.core.types import Decision, OperationFacts, OperationState
from shared.db.audit import append_transition
from shared.db.models import Operation, Receipt
from shared.runtime.settings import Settings

__all__ = [
    "Passage",
    "StateChange",
    "change_state",
    "decision_document",
    "facts_for",
]


_PLAIN = frozenset({str, int, float, bool, type(None)})
_FIELDS: dict[type, tuple[str, ...] | None] = {}


def _dataclass_fields(kind: type) -> tuple[str, ...] | None:
    names = _FIELDS.get(kind, ())
    if names == ():
        names = (
            tuple(f.name for f in dataclasses.fields(kind))
            if dataclasses.is_dataclass(kind)
            else None
        )
        _FIELDS[kind] = names
    return names


def _jsonable(value: Any) -> Any:
    kind = type(value)
    # The common exact types first (the answer is the same as the general rules below).
    if kind in _PLAIN:
        return value
    if kind is dict:
        return {str(k): _jsonable(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    names = _dataclass_fields(kind)
    if names is not None:
        return {name: _jsonable(getattr(value, name)) for name in names}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)  # the UNKNOWN sentinel and other markers


def decision_document(decision: Decision) -> dict[str, Any]:
    """The decision as JSON data, stored on the operation for ``GET /v1/operations/{id}``."""
    doc: dict[str, Any] = _jsonable(decision)
    doc["class"] = doc.pop("class_", None)
    for condition in doc.get("conditions") or ():
        # A caller sees the fields the conditions name, never a structured provider body.
        condition["observed"] = shown_value(condition.get("observed"))
        condition["expected"] = shown_expected(condition.get("expected"))
    doc["correlation"] = [
        {"strategy": s, "assurance": a, "value": _jsonable(v)} for s, a, v in decision.correlation
    ]
    return doc


_OPERATIONS = cast(Table, Operation.__table__)
_COLUMN_OF = {attr.key: attr.columns[0].key for attr in Operation.__mapper__.column_attrs}
"""Attribute name → column name (they differ for ``metadata_``)."""

# Built once; the SET clause comes from the parameters' keys (SQLAlchemy compiles and caches
# one form per set of columns written).
_FENCED_UPDATE = update(_OPERATIONS).where(
    _OPERATIONS.c.id == bindparam("_op_id"),
    _OPERATIONS.c.version == bindparam("_op_version"),
    _OPERATIONS.c.state == bindparam("_op_state"),
)


@dataclass(frozen=True, slots=True)
class Passage:
    """A state an operation passes through on its way to another in the same transaction: it
    is never committed, so the one UPDATE writes the final state, and the audit chain still
    records the step into it and the step out of it (two transitions, in that order)."""

    state: OperationState
    verdict: str | None
    reason: str | None
    cause: str
    details: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class StateChange:
    """A state change that was written: the receipt it issued, when it was asked to."""

    receipt: Receipt | None = None


def change_state(
    session: Session,
    op: Operation,
    *,
    receipt: bool,
    to_state: OperationState | str,
    verdict: str | None,
    reason: str | None,
    verdict_class: str | None,
    final: bool,
    decision: Decision | Mapping[str, Any] | None,
    cause: str,
    now: datetime,
    details: dict[str, Any] | None = None,
    changes: Mapping[str, Any] | None = None,
    settings: Settings | None = None,
    readings: Sequence[Any] | None = None,
    through: Passage | None = None,
) -> StateChange | None:
    """Move ``op`` to ``to_state`` with its verdict, fenced by ``op.version``; with ``receipt``,
    issue the receipt of that final verdict (``ValueError`` for an open state or no verdict).

    ``changes`` are other columns written by the same fenced UPDATE (e.g. the action report);
    ``settings`` go to the receipt signer (default: the process settings); ``readings``, the
    latest readings ``decision`` was made from, read in this transaction, spare the receipt a
    second read of them (see :func:`shared.lifecycle.receipts.issue_receipt`); ``through``, a
    state passed on the way (both steps checked by the lifecycle, the version bumped once for
    each, as two writes would have).
    Raises ``IllegalTransition`` when the lifecycle forbids the change. Returns None when the
    row changed underneath (another writer won); nothing is written then. A transition row is
    appended whenever the state, the verdict or the reason changes.
    """
    if receipt and (not final or verdict is None):
        raise ValueError("a receipt is issued only for a final verdict")
    current = OperationState(op.state)
    target = OperationState(to_state)
    if through is None:
        transition(current, target)  # same-state steps too: a final state never repeats
    else:
        transition(current, through.state)
        transition(through.state, target)
    values: dict[str, Any] = dict(changes or {})
    values.update(
        state=target.value,
        verdict=verdict,
        reason=reason,
        verdict_class=verdict_class,
        final=final,
        updated_at=now,
        version=op.version + (1 if through is None else 2),
    )
    if decision is not None:
        values["decision"] = (
            decision_document(decision) if isinstance(decision, Decision) else dict(decision)
        )
        values["decided_at"] = now
    session.flush()  # what autoflush would have sent before the UPDATE
    params = {_COLUMN_OF[key]: value for key, value in values.items()}
    params.update(_op_id=op.id, _op_version=op.version, _op_state=current.value)
    result = session.connection().execute(_FENCED_UPDATE, params)
    if result.rowcount != 1:
        return None
    previous = (op.state, op.verdict, op.reason)
    for key, value in values.items():
        set_committed_value(op, key, value)
    if through is not None:
        previous = _record_step(
            session,
            op,
            previous,
            (through.state.value, through.verdict, through.reason),
            cause=through.cause,
            details=through.details,
            now=now,
        )
    issued = None
    if receipt:
        # The receipt never reads the audit chain, so it is signed and stored before the
        # transition is appended: appending locks the workspace's chain until commit, and every
        # other state change of the workspace waits on that lock meanwhile.
        from shared.lifecycle.receipts import issue_receipt

        issued = issue_receipt(
            session,
            op,
            now=now,
            settings=settings,
            latest=readings,
            first=not is_final(current),
        )
    _record_step(
        session,
        op,
        previous,
        (target.value, verdict, reason),
        cause=cause,
        details=details,
        now=now,
    )
    return StateChange(issued)


_Step = tuple[str, str | None, str | None]
"""A state, its verdict and its reason."""


def _record_step(
    session: Session,
    op: Operation,
    previous: _Step,
    step: _Step,
    *,
    cause: str,
    details: dict[str, Any] | None,
    now: datetime,
) -> _Step:
    """Record ``op``'s move from ``previous`` to ``step`` (written by the caller's UPDATE): the
    transition counted once committed when the state changes, and appended to the audit chain
    when the state, the verdict or the reason does. Returns ``step``, where the next one
    starts."""
    if step[0] != previous[0]:
        _count_transition_on_commit(session, step[0])
    if step != previous:
        append_transition(
            session,
            workspace_id=op.workspace_id,
            operation_id=op.id,
            from_state=previous[0],
            to_state=step[0],
            verdict=step[1],
            reason=step[2],
            cause=cause,
            now=now,
            details=details,
        )
    return step


_COUNTS_KEY = "provely_transitions_to_count"


def _count_transition_on_commit(session: Session, state: str) -> None:
    """``provely_operation_transitions_total{state}`` counts the change once it is committed."""
    session.info.setdefault(_COUNTS_KEY, []).append(state)


@event.listens_for(Session, "after_commit")
def _count_committed_transitions(session: Session) -> None:
    states = session.info.pop(_COUNTS_KEY, None)
    if not states:
        return
    from shared.runtime.metrics import OPERATION_TRANSITIONS

    for state in states:
        OPERATION_TRANSITIONS.labels(state=state).inc()


@event.listens_for(Session, "after_soft_rollback")
def _forget_rolled_back_transitions(session: Session, previous_transaction: Any) -> None:
    if previous_transaction.parent is None:  # the outermost transaction: nothing was kept
        session.info.pop(_COUNTS_KEY, None)


def facts_for(op: Operation) -> OperationFacts:
    """What the verdict engine knows about ``op`` besides its observations."""
    return OperationFacts(
        id=op.id,
        created_at=op.created_at,
        input=dict(op.input or {}),
        action_result=op.action_result,
        action_reported_at=op.action_reported_at,
        action_phase=op.action_phase,
        learned_keys=dict(op.learned_keys or {}),
        deadline=op.deadline,
        attempts=op.attempts,
    )
