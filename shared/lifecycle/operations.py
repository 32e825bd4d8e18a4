"""Operations in the record: the one place that changes an operation's state.

:func:`change_state` checks the core's lifecycle table, then writes the new state with
``UPDATE operations … WHERE id = :id AND version = :v AND state = :current``, bumps the
version, issues the receipt when the new state is final with a verdict, and appends the
transition to the workspace's audit chain last (its lock is held until commit) — all in the
caller's transaction. It returns False when another writer got there first; the caller re-reads
the operation and decides again.

Also: :func:`facts_for` (what the engine needs besides observations), :func:`contract_for` (the
exact contract an operation was created with, checked against its hash), and the contract
look-ups the API uses (:func:`find_contract`, :func:`list_contracts`).

Errors::

    LookupError
    └── ContractNotFound        no such contract (or version) for this workspace
        └── ContractMismatch    the contract found no longer has the operation's hash
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, cast

from sqlalchemy import Table, bindparam, event, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from shared.core.contract import Contract, contract_hash
from shared.core.shown import shown_expected, shown_value
from shared.core.state_machine import transition
from shared.core.types import Decision, OperationFacts, OperationState
from shared.db.audit import append_transition
from shared.db.models import CustomContract, Operation
from shared.runtime.settings import Settings
from shared.trust.registry import get_registry

__all__ = [
    "ContractMismatch",
    "ContractNotFound",
    "ProviderSkill",
    "ResolvedContract",
    "change_state",
    "contract_for",
    "decision_document",
    "facts_for",
    "find_contract",
    "list_contracts",
    "provider_skill",
    "shipped_contracts",
]


class ContractNotFound(LookupError):
    """No contract with this id (and version) is available to the workspace."""


class ContractMismatch(ContractNotFound):
    """The contract found under the operation's id and version has another hash."""


@dataclass(frozen=True, slots=True)
class ResolvedContract:
    contract: Contract
    hash: str
    custom_id: int | None = None  # custom_contracts.id when the workspace uploaded it
    certification: str | None = None  # overrides the file's (custom, unsigned)


@dataclass(frozen=True, slots=True)
class ProviderSkill:
    """What the API and the admin CLI need to know about a provider's skill."""

    provider: str
    default_base_url: str | None = None
    signature_scheme: str | None = None
    signature_tolerance_seconds: int | None = None
    readback_auth: str | None = None
    rate_limit_per_second: float | None = None
    # (http statuses, error types): a provider answer that means "the action was not performed"
    action_rejections: tuple[tuple[tuple[int, ...], tuple[str, ...]], ...] = field(default=())

    def rejects(self, http_status: int | None, error: Mapping[str, Any] | None) -> bool:
        """True when this provider answer means the action was refused and not performed."""
        if http_status is None:
            return False
        error_type = _error_type(error)
        for statuses, types in self.action_rejections:
            if http_status in statuses and (not types or error_type in types):
                return True
        return False


def _error_type(error: Mapping[str, Any] | None) -> str | None:
    """The provider's error type: ``{"type": …}`` or Stripe's ``{"error": {"type": …}}``."""
    if not isinstance(error, Mapping):
        return None
    inner = error.get("error")
    if isinstance(inner, Mapping) and isinstance(inner.get("type"), str):
        return str(inner["type"])
    value = error.get("type")
    return value if isinstance(value, str) else None


def shipped_contracts() -> list[ResolvedContract]:
    """Every contract of the registry (``contracts/`` and the configured contract paths)."""
    return [
        ResolvedContract(e.contract, e.hash, None, e.certification)
        for e in get_registry().entries()
    ]


def provider_skill(provider: str) -> ProviderSkill | None:
    """The skill of ``provider`` (default base URL, signature scheme, action rejections)."""
    loaded = get_registry().skill(provider)
    if loaded is None:
        return None
    manifest = loaded.manifest
    return ProviderSkill(
        provider=provider,
        default_base_url=manifest.default_base_url,
        signature_scheme=manifest.signature.scheme if manifest.signature else None,
        signature_tolerance_seconds=(
            manifest.signature.tolerance_seconds if manifest.signature else None
        ),
        readback_auth=manifest.readback.auth if manifest.readback else None,
        rate_limit_per_second=(
            manifest.readback.rate_limit_per_second if manifest.readback else None
        ),
        action_rejections=tuple(
            (tuple(r.http_status), tuple(r.error_type)) for r in manifest.action_rejections
        ),
    )


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


def change_state(
    session: Session,
    op: Operation,
    *,
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
) -> bool:
    """Move ``op`` to ``to_state`` with its verdict, fenced by ``op.version``.

    ``changes`` are other columns written by the same fenced UPDATE (e.g. the action report);
    ``settings`` go to the receipt signer (default: the process settings); ``readings``, the
    latest readings ``decision`` was made from, read in this transaction, spare the receipt a
    second read of them (see :func:`shared.lifecycle.receipts.issue_receipt`).
    Raises ``IllegalTransition`` when the lifecycle forbids the change. Returns False when the
    row changed underneath (another writer won); nothing is written then. A transition row is
    appended whenever the state, the verdict or the reason changes.
    """
    current = OperationState(op.state)
    target = OperationState(to_state)
    transition(current, target)  # same-state steps too: a final state never repeats
    values: dict[str, Any] = dict(changes or {})
    values.update(
        state=target.value,
        verdict=verdict,
        reason=reason,
        verdict_class=verdict_class,
        final=final,
        updated_at=now,
        version=op.version + 1,
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
        return False
    previous = (op.state, op.verdict, op.reason)
    for key, value in values.items():
        set_committed_value(op, key, value)
    if target.value != previous[0]:
        _count_transition_on_commit(session, target.value)
    if final and verdict is not None:
        # The receipt never reads the audit chain, so it is signed and stored before the
        # transition is appended: appending locks the workspace's chain until commit, and every
        # other state change of the workspace waits on that lock meanwhile.
        from shared.lifecycle.receipts import issue_receipt

        issue_receipt(session, op, now=now, settings=settings, latest=readings)
    if (target.value, verdict, reason) != previous:
        append_transition(
            session,
            workspace_id=op.workspace_id,
            operation_id=op.id,
            from_state=previous[0],
            to_state=target.value,
            verdict=verdict,
            reason=reason,
            cause=cause,
            now=now,
            details=details,
        )
    return True


_COUNTS_KEY = "provely_transitions_to_count"


def _count_transition_on_commit(session: Session, state: str) -> None:
    """``provely_operation_transitions_total{state}`` counts the change once it is committed."""
    session.info.setdefault(_COUNTS_KEY, []).append(state)


@event.listens_for(Session, "after_commit")
def _count_committed_transitions(session: Session) -> None:
    states = session.info.pop(_COUNTS_KEY, None)
    if not states:
        return
    from shared.runtime.observability import OPERATION_TRANSITIONS

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


_custom_cache: dict[tuple[int, str], ResolvedContract] = {}


def _custom(row: CustomContract) -> ResolvedContract:
    """A stored custom contract, parsed once per row (rows are never rewritten)."""
    key = (row.id, row.hash)
    found = _custom_cache.get(key)
    if found is None:
        contract = Contract.model_validate(row.document)
        found = ResolvedContract(contract, contract_hash(contract), row.id, "custom")
        if len(_custom_cache) > 1024:
            _custom_cache.clear()
        _custom_cache[key] = found
    return found


def _shipped(contract_id: str, version: str | None) -> list[ResolvedContract]:
    registry = get_registry()
    versions = registry.versions(contract_id)
    if version is not None:
        versions = [v for v in versions if v == version]
    found = []
    for v in versions:
        entry = registry.entry(contract_id, v)
        found.append(ResolvedContract(entry.contract, entry.hash, None, entry.certification))
    return found


def contract_for(session: Session, op: Operation) -> Contract:
    """The contract ``op`` was created with; raises ContractMismatch when its hash changed."""
    if op.custom_contract_id is not None:
        row = session.get(CustomContract, op.custom_contract_id)
        if row is None or row.workspace_id != op.workspace_id:
            raise ContractNotFound(f"custom contract {op.custom_contract_id} is gone")
        resolved = _custom(row)
    else:
        entry = get_registry().by_hash(op.contract_hash)
        if (
            entry is not None
            and entry.contract.id == op.contract_id
            and entry.contract.version == op.contract_version
        ):
            return entry.contract
        resolved = find_contract(session, op.workspace_id, op.contract_id, op.contract_version)
    if resolved.hash != op.contract_hash:
        raise ContractMismatch(
            f"{op.contract_id} {op.contract_version} has hash {resolved.hash[:16]}, "
            f"the operation was created with {op.contract_hash[:16]}"
        )
    return resolved.contract


def list_contracts(session: Session, workspace_id: str) -> list[ResolvedContract]:
    """Every contract the workspace may use: shipped ones, then its own; by id and version."""
    found = shipped_contracts()
    rows = session.execute(
        select(CustomContract).where(CustomContract.workspace_id == workspace_id)
    ).scalars()
    found.extend(_custom(row) for row in rows)
    found.sort(key=lambda r: (r.contract.id, r.contract.version_key))
    return found


def find_contract(
    session: Session, workspace_id: str, contract_id: str, version: str | None = None
) -> ResolvedContract:
    """The contract ``contract_id`` at ``version`` (default: the newest) for the workspace.

    A shipped contract id is looked up in the registry only: a workspace cannot shadow it
    (``POST /v1/contracts`` refuses shipped ids). Other ids are the workspace's own contracts.
    Raises ``shared.trust.registry.RegistryError`` when the shipped contracts cannot be loaded.
    """
    if get_registry().versions(contract_id):
        candidates = _shipped(contract_id, version)
    else:
        query = select(CustomContract).where(
            CustomContract.workspace_id == workspace_id,
            CustomContract.contract_id == contract_id,
        )
        if version is not None:
            query = query.where(CustomContract.version == version)
        candidates = [_custom(row) for row in session.execute(query).scalars()]
    if not candidates:
        wanted = contract_id if version is None else f"{contract_id} {version}"
        raise ContractNotFound(f"no contract {wanted}")
    return max(candidates, key=lambda r: r.contract.version_key)
