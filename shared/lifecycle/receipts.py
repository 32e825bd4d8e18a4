"""Signed receipts for final verdicts: issuing (and superseding) and serving them.

- :func:`issue_receipt` signs the receipt of an operation that just reached a final state. It
  runs inside :func:`shared.lifecycle.operations.change_state`'s transaction, so a final state and
  its receipt are written together or not at all. When the operation already has a current receipt,
  the new one names it in ``supersedes`` and the old row stops being current; its body and
  signature are never touched (safety rule 8).
- :func:`current_receipt` and :func:`receipt_document_for` serve the stored receipt.

What a receipt cites is read by ``shared.lifecycle.receipt_evidence``; late evidence that
supersedes a VERIFIED receipt is handled by ``shared.lifecycle.late_evidence``; a document is
checked offline by ``shared.lifecycle.receipt_check``.

Errors::

    ReceiptError
    └── ReceiptNotIssuable      the operation is open, or has no final verdict
    ReceiptKeyError (shared.lifecycle.receipt_keys)   the signing key cannot be loaded
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from shared.core.receipt import (
    ReceiptContract,
    build_signed_receipt_body,
    receipt_document,
)
from shared.core.types import OperationState, Verdict
from shared.core.verifiers import verifier_of
from shared.lifecycle.receipt_evidence import (
    as_utc,
    receipt_conditions,
    receipt_correlation,
    receipt_evidence,
)
from shared.lifecycle.receipt_keyring import sign_payload
from shared.lifecycle.receipt_keys import active_signing_key, last_signing_key
from shared.lifecycle.watch import WATCHED_STATES

if TYPE_CHECKING:
    from sqlalchemy import Table
    from sqlalchemy.orm import Session

    from shared.db.models import Operation, Receipt
    from shared.runtime.settings import Settings

__all__ = [
    "ReceiptError",
    "ReceiptNotIssuable",
    "current_receipt",
    "issue_receipt",
    "receipt_document_for",
]


class ReceiptError(Exception):
    """Base of the errors this module raises on purpose."""


class ReceiptNotIssuable(ReceiptError):
    """A receipt was asked for an operation that is open or has no final verdict."""


def _new_receipt_id() -> str:
    return "rcpt_" + uuid.uuid4().hex


def current_receipt(session: Session, operation_id: str) -> Receipt | None:
    """The operation's current receipt (None while it has none)."""
    from sqlalchemy import select

    from shared.db.models import Receipt

    return session.execute(
        select(Receipt)
        .where(Receipt.operation_id == operation_id, Receipt.current.is_(True))
        .order_by(Receipt.created_at.desc())
        .limit(1)
    ).scalar_one_or_none()


def receipt_document_for(row: Receipt) -> dict[str, Any]:
    """The document served and exported for a stored receipt."""
    return receipt_document(row.body, signature=row.signature, key_id=row.key_id)


@dataclass(frozen=True, slots=True)
class _IssueStatements:
    # One read: the active signing key (key_id, has_private) joined with the operation's
    # current receipts (id; locked, oldest first). One row with NULLs when neither exists.
    current: Any
    insert: Any
    # The same INSERT, of no row unless the key that signed it is active (in one statement).
    insert_if_key_active: Any


_ISSUE: _IssueStatements | None = None


def _issue_statements() -> _IssueStatements:
    """Built once: constructing statements and their cache keys costs more than running them."""
    global _ISSUE
    if _ISSUE is None:
        from sqlalchemy import bindparam, exists, insert, literal, select, true

        from shared.db.models import Receipt, ReceiptKey
        from shared.lifecycle.receipt_keyring import ACTIVE
        from shared.lifecycle.receipt_keys import active_key_columns

        table = cast("Table", Receipt.__table__)
        keys = cast("Table", ReceiptKey.__table__)
        columns = list(table.c)
        params = {c.name: bindparam(c.name, type_=c.type) for c in columns}
        key_active = exists().where(keys.c.key_id == params["key_id"], keys.c.status == ACTIVE)
        one = select(literal(1).label("one")).subquery("one")
        key = active_key_columns().subquery("active_key")
        current = (
            select(table.c.id, table.c.created_at)
            .where(table.c.operation_id == bindparam("operation_id"), table.c.current.is_(True))
            .with_for_update()
            .subquery("current_receipts")
        )
        _ISSUE = _IssueStatements(
            current=select(key.c.key_id, key.c.has_private, current.c.id)
            .select_from(one.outerjoin(key, true()).outerjoin(current, true()))
            .order_by(current.c.created_at),
            insert=insert(table),
            insert_if_key_active=insert(table)
            .from_select(columns, select(*params.values()).where(key_active))
            .execution_options(preserve_rowcount=True),
        )
    return _ISSUE


def issue_receipt(
    session: Session,
    operation: Operation,
    *,
    now: datetime,
    settings: Settings | None = None,
    latest: Sequence[Any] | None = None,
    first: bool = False,
) -> Receipt:
    """Sign and store the receipt of ``operation``'s final verdict (in the caller's transaction).

    Refuses an open operation (``ReceiptNotIssuable``). When the operation already has a current
    receipt, the new one supersedes it: the old row is kept as it was, only ``current`` drops.
    ``latest``: the latest readings the decision was made from, read in this transaction (rows
    with ``channel``, ``observed_at`` and ``value``, ordered by id); the webhook evidence is
    taken from them when they hold it, instead of read again.
    ``first``: the operation has just left an open state, so it has no receipt to supersede (no
    final state leaves for an open one, and the record refuses a second current receipt): none
    is read, and the receipt is signed with the key this process signed with last when that key
    is still active, checked by the statement that stores the receipt (no read of the key).
    """
    from sqlalchemy import update
    from sqlalchemy.orm.attributes import set_committed_value

    from shared.core.state_machine import is_final
    from shared.db.models import Receipt
    from shared.lifecycle.contract_cache import cached_contract_for

    verdict = operation.verdict
    if not operation.final or not is_final(operation.state):
        raise ReceiptNotIssuable(f"operation {operation.id} is open ({operation.state})")
    if verdict is None or verdict not in Verdict.__members__ or verdict == Verdict.PENDING:
        raise ReceiptNotIssuable(f"operation {operation.id} has no final verdict ({verdict})")

    session.flush()  # what autoflush would have sent before the reads below
    table = cast("Table", Receipt.__table__)
    statements = _issue_statements()
    previous: list[str] = []
    active: dict[str, Any] = {}  # the active key, when read with the current receipts
    if not first:
        read = session.execute(statements.current, {"operation_id": operation.id}).all()
        previous = [row.id for row in read if row.id is not None]
        active["active"] = (
            None if read[0].key_id is None else (read[0].key_id, bool(read[0].has_private))
        )
    # The hash pins the contract: the worker that just decided holds it checked in memory.
    contract = cached_contract_for(session, operation)
    decision: Mapping[str, Any] = operation.decision or {}
    webhook = {c.name for c in contract.channels if verifier_of(c).reduces_events}
    evidence = receipt_evidence(session, operation, decision, webhook, latest)
    decided_at = as_utc(operation.decided_at or now)
    observed = [e.observed_at for e in evidence if e.observed_at is not None]
    valid_as_of = max(observed) if observed else decided_at
    receipt_id = _new_receipt_id()
    supersedes = previous[-1] if previous else None
    subject_id = operation.subject_id
    if subject_id is None:
        subject_id = decision.get("subject_id")
    body, payload = build_signed_receipt_body(
        receipt_id=receipt_id,
        operation_id=operation.id,
        workspace_id=operation.workspace_id,
        contract=ReceiptContract(
            id=operation.contract_id,
            version=operation.contract_version,
            hash=operation.contract_hash,
            completion_level=operation.completion_level,
        ),
        verdict=verdict,
        reason=operation.reason or "",
        class_=operation.verdict_class,
        decided_at=decided_at,
        valid_as_of=valid_as_of,
        subject={
            "type": contract.subject.type,
            "key": contract.subject.identity.key,
            "id": subject_id,
        },
        correlation=receipt_correlation(decision),
        conditions=receipt_conditions(decision),
        evidence=evidence,
        supersedes=supersedes,
        claimable=operation.state != OperationState.HUMAN_REVIEW,
        watch_until=(
            as_utc(operation.watch_until)
            if operation.watch_until is not None and operation.state in WATCHED_STATES
            else None
        ),
    )
    values = {
        "id": receipt_id,
        "operation_id": operation.id,
        "workspace_id": operation.workspace_id,
        "body": body,
        "supersedes": supersedes,
        "current": True,
        "created_at": now,
    }
    last = last_signing_key(settings) if first else None
    if last is not None:
        values.update(signature=sign_payload(last.private_key, payload), key_id=last.key_id)
        stored = session.connection().execute(statements.insert_if_key_active, values)
        if stored.rowcount == 1:
            return _stored(session, values)
        # Retired since this process signed with it (a rotation): read the active key.
    key = active_signing_key(session, now=now, settings=settings, **active)
    values.update(signature=sign_payload(key.private_key, payload), key_id=key.key_id)
    if previous:
        # The old rows stop being current; their body and signature are never touched.
        session.execute(update(table).where(table.c.id.in_(previous)).values(current=False))
        for old_id in previous:
            loaded = session.identity_map.get(session.identity_key(Receipt, old_id))
            if loaded is not None:
                set_committed_value(loaded, "current", False)
    session.execute(statements.insert, values)
    return _stored(session, values)


def _stored(session: Session, values: dict[str, Any]) -> Receipt:
    """The stored row, as the session would hold it after a flush (no second INSERT)."""
    from sqlalchemy.orm import make_transient_to_detached

    from shared.db.models import Receipt

    row = Receipt(**values)
    make_transient_to_detached(row)
    session.add(row)
    return row
