"""What the agent API does to create an operation: the replay of an ``Idempotency-Key``, the
contract it binds, the checks of its input, and the insert.

Each function works in the caller's transaction.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, make_transient_to_detached

from services.ingress.api.inputs import check_input
from services.ingress.api.schemas import CreateOperationIn
from services.ingress.problems import ApiError, FieldProblem
from shared.core.types import OperationState, Verdict
from shared.db.audit import append_transition
from shared.db.models import Operation
from shared.db.tenants import new_id
from shared.lifecycle.contracts import ContractNotFound, ResolvedContract, find_contract
from shared.lifecycle.steps import AWAITING_ACTION
from shared.runtime.settings import Settings

__all__ = [
    "AWAITING_ACTION",
    "Created",
    "check_field_sizes",
    "check_operation_input",
    "create_operation",
    "prepare_operation",
]


@dataclass(frozen=True, slots=True)
class Created:
    operation: Operation
    new: bool  # False: an earlier request with the same Idempotency-Key made it


def _request_hash(body: CreateOperationIn) -> str:
    document = json.dumps(
        body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), allow_nan=False
    )
    return hashlib.sha256(document.encode("ascii")).hexdigest()


def _replay(session: Session, workspace_id: str, key: str, digest: str) -> Operation | None:
    found = session.execute(
        select(Operation).where(
            Operation.workspace_id == workspace_id, Operation.idempotency_key == key
        )
    ).scalar_one_or_none()
    if found is None:
        return None
    if found.request_hash != digest:
        raise ApiError(
            409,
            "idempotency-key-reused",
            "this Idempotency-Key was used with another request body",
            operation_id=found.id,
        )
    return found


_OPERATIONS = cast(Table, Operation.__table__)
_INSERT = insert(_OPERATIONS)
_COLUMN_OF = {attr.key: attr.columns[0].key for attr in Operation.__mapper__.column_attrs}
"""Attribute name → column name (they differ for ``metadata_``)."""


_LEFT_TO_THE_SERVER = {
    attr.key: column.default.arg
    if column.default is not None and column.default.is_scalar
    else None
    for attr in Operation.__mapper__.column_attrs
    for column in attr.columns[:1]
}
"""What a column an insert leaves out holds after it: the model's scalar default (which the
Core INSERT writes, ``rechecks``' 0), else NULL."""


def _insert(session: Session, values: dict[str, Any]) -> Operation:
    """Insert the operation of ``values`` (by attribute name; the columns left out are the
    server's) with one Core INSERT, the statement the unit of work sent, and return it as the
    session would hold it after a flush: the unit of work's bookkeeping cost more CPU than the
    rest of the insert."""
    session.connection().execute(_INSERT, {_COLUMN_OF[k]: v for k, v in values.items()})
    op = Operation(**(_LEFT_TO_THE_SERVER | values))
    make_transient_to_detached(op)  # persistent, its values the committed ones: no flush
    session.add(op)
    return op


def _insert_once(
    session: Session, values: dict[str, Any], workspace_id: str, key: str, digest: str
) -> Created:
    """Insert the operation of ``values``; when a concurrent request with the same key won,
    its operation instead."""
    try:
        with session.begin_nested():
            return Created(_insert(session, values), new=True)
    except IntegrityError:
        earlier = _replay(session, workspace_id, key, digest)
        if earlier is None:
            raise
        return Created(earlier, new=False)


def prepare_operation(
    session: Session,
    *,
    workspace_id: str,
    body: CreateOperationIn,
    idempotency_key: str | None,
) -> Operation | ResolvedContract:
    """The first, short transaction of a create: the earlier operation of a replayed
    ``Idempotency-Key``, else the contract the new operation binds (422 when there is none)."""
    if idempotency_key is not None:
        earlier = _replay(session, workspace_id, idempotency_key, _request_hash(body))
        if earlier is not None:
            return earlier
    try:
        return find_contract(session, workspace_id, body.contract, body.contract_version)
    except ContractNotFound as exc:
        field = "contract_version" if body.contract_version else "contract"
        raise ApiError(
            422,
            "unknown-contract",
            str(exc),
            errors=[FieldProblem(field=field, message=str(exc))],
        ) from None


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON (how its limit is counted)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return len(text.encode("utf-8"))


def check_field_sizes(body: CreateOperationIn, settings: Settings) -> None:
    """422 naming ``input`` or ``metadata`` when either passes
    ``settings.operation_field_max_bytes``: every view of the operation carries them."""
    limit = settings.operation_field_max_bytes
    problems = [
        FieldProblem(
            field=name,
            message=f"is {size} bytes as JSON, more than the limit of {limit} "
            "(PROVELY_OPERATION_FIELD_MAX_BYTES)",
        )
        for name, value in (("input", body.input), ("metadata", body.metadata))
        if value is not None and (size := json_size(value)) > limit
    ]
    if problems:
        detail = "; ".join(f"{p.field} {p.message}" for p in problems)
        raise ApiError(422, "field-too-large", detail, errors=problems)


def check_operation_input(resolved: ResolvedContract, body: CreateOperationIn) -> None:
    """422 when the input does not satisfy the contract. Runs outside any transaction: it
    matches the contract's patterns (RE2, linear time) on what the agent sent."""
    problems = check_input(resolved.contract, body.input)
    if problems:
        detail = "; ".join(f"{p.field} {p.message}" for p in problems)
        raise ApiError(422, "invalid-input", detail, errors=problems)


def create_operation(
    session: Session,
    *,
    workspace_id: str,
    action_window_seconds: int | None,
    body: CreateOperationIn,
    resolved: ResolvedContract,
    idempotency_key: str | None,
    settings: Settings,
    now: datetime,
) -> Created:
    """Insert the operation on ``resolved`` (from :func:`prepare_operation`, its input checked
    by :func:`check_operation_input`), or return the one a concurrent replay made.
    ``action_window_seconds``: the workspace's own window (read with its key), else the
    settings' window applies."""
    digest = _request_hash(body)
    if idempotency_key is not None:
        earlier = _replay(session, workspace_id, idempotency_key, digest)
        if earlier is not None:
            return Created(earlier, new=False)
    window = action_window_seconds or settings.action_window_seconds
    values: dict[str, Any] = dict(
        id=new_id("op"),
        workspace_id=workspace_id,
        contract_id=resolved.contract.id,
        contract_version=resolved.contract.version,
        contract_hash=resolved.hash,
        completion_level=resolved.contract.completion_level,
        custom_contract_id=resolved.custom_id,
        state=OperationState.CREATED.value,
        verdict=Verdict.PENDING.value,
        reason=AWAITING_ACTION,
        final=False,
        version=1,
        input=body.input,
        metadata_=body.metadata,
        idempotency_key=idempotency_key,
        request_hash=digest,
        learned_keys={},
        attempts=0,
        fence=0,
        action_deadline=now + timedelta(seconds=window),
        created_at=now,
        updated_at=now,
    )
    if idempotency_key is None:
        op = _insert(session, values)
    else:
        created = _insert_once(session, values, workspace_id, idempotency_key, digest)
        if not created.new:
            return created
        op = created.operation
    append_transition(
        session,
        workspace_id=workspace_id,
        operation_id=op.id,
        from_state=None,
        to_state=op.state,
        verdict=op.verdict,
        reason=op.reason,
        cause="created",
        now=now,
    )
    return Created(op, new=True)
