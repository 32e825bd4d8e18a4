"""A person's review of an operation a person decides: recorded once, answered with a receipt.

``record_review`` is the one place a review is written (the API's ``POST …/review``, the
console and ``provely review`` call it). In the caller's transaction it

1. refuses an operation no person decides (only HUMAN_REVIEW, CONTRADICTED and EXPIRED are
   reviewed), one already reviewed (a review is never overwritten) and one with no receipt to
   follow;
2. writes the review on the operation under its version guard (a concurrent change loses);
3. signs a review receipt (``shared.core.review_receipt``) that follows the operation's current
   receipt: the old receipt stops being current, its body and signature stay as they were;
4. appends the review to the audit chain (cause ``review``: reviewer, verdict, note, receipt).

The runtime's verdict is never rewritten: the operation keeps its state and verdict, the review
sits beside them. What may be claimed after a review is :func:`shared.core.claim.claim_for`'s
answer (a VERIFIED review of HUMAN_REVIEW only).

``review_queue`` lists what waits for a person, late contradictions first, then the other
HUMAN_REVIEW operations, then CONTRADICTED and EXPIRED, oldest first within each.
``receipt_history`` is an operation's receipts in the order they were issued.

Errors::

    ReviewRefused     the operation is not reviewable now (the API answers 409)
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import Table, case, insert, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from shared.core.claim import claim_for
from shared.core.receipt import signing_payload
from shared.core.review_receipt import REVIEW_REASON, review_receipt_body
from shared.core.types import OperationState
from shared.db.audit import append_transition
from shared.db.models import Operation, Receipt
from shared.lifecycle.late_evidence import LATE_CONTRADICTION
from shared.lifecycle.receipt_keyring import sign_payload
from shared.lifecycle.receipt_keys import active_signing_key
from shared.lifecycle.receipts import current_receipt
from shared.runtime.settings import Settings

__all__ = [
    "REVIEWABLE_STATES",
    "ReviewRefused",
    "ReviewResult",
    "receipt_history",
    "record_review",
    "review_queue",
]

REVIEWABLE_STATES = (
    OperationState.HUMAN_REVIEW.value,
    OperationState.CONTRADICTED.value,
    OperationState.EXPIRED.value,
)


class ReviewRefused(Exception):
    """The operation cannot be reviewed now; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class ReviewResult:
    receipt: Receipt
    follows: str


def _guard(op: Operation) -> None:
    if op.state not in REVIEWABLE_STATES:
        raise ReviewRefused(
            "only an operation in HUMAN_REVIEW, CONTRADICTED or EXPIRED is reviewed "
            f"(state {op.state})"
        )
    if op.review is not None:
        raise ReviewRefused("the operation was already reviewed; a review is never overwritten")


def _write_review(session: Session, op: Operation, document: dict[str, str], now: datetime) -> None:
    result = session.execute(
        update(Operation)
        .where(
            Operation.id == op.id,
            Operation.version == op.version,
            Operation.review.is_(None),
        )
        .values(review=document, version=op.version + 1, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise ReviewRefused("the operation changed while the review was recorded; read it again")
    set_committed_value(op, "review", document)
    set_committed_value(op, "version", op.version + 1)
    set_committed_value(op, "updated_at", now)


def _sign_review_receipt(
    session: Session,
    op: Operation,
    followed: Receipt,
    *,
    verdict: str,
    note: str,
    reviewer: str,
    now: datetime,
    settings: Settings | None,
) -> Receipt:
    claim = claim_for(
        state=op.state,
        verdict=op.verdict,
        completion_level=op.completion_level,
        title="",
        reviewed_verdict=verdict,
    )
    body = review_receipt_body(
        followed.body,
        receipt_id="rcpt_" + uuid.uuid4().hex,
        verdict=verdict,
        note=note,
        reviewer=reviewer,
        reviewed_at=now,
        claimable=claim.safe_to_claim_complete,
    )
    key = active_signing_key(session, now=now, settings=settings)
    table = cast(Table, Receipt.__table__)
    session.execute(update(table).where(table.c.id == followed.id).values(current=False))
    set_committed_value(followed, "current", False)
    values = {
        "id": body["id"],
        "operation_id": op.id,
        "workspace_id": op.workspace_id,
        "body": body,
        "signature": sign_payload(key.private_key, signing_payload(body)),
        "key_id": key.key_id,
        "supersedes": followed.id,
        "current": True,
        "created_at": now,
    }
    session.execute(insert(table), values)
    row = session.get(Receipt, body["id"])
    assert row is not None
    return row


def record_review(
    session: Session,
    op: Operation,
    *,
    verdict: str,
    note: str,
    reviewer: str,
    now: datetime,
    settings: Settings | None = None,
) -> ReviewResult:
    """Record a person's review of ``op`` and sign its receipt (see the module docstring)."""
    _guard(op)
    followed = current_receipt(session, op.id)
    if followed is None:
        raise ReviewRefused("the operation has no receipt for a review to follow")
    receipt = _sign_review_receipt(
        session,
        op,
        followed,
        verdict=verdict,
        note=note,
        reviewer=reviewer,
        now=now,
        settings=settings,
    )
    document = {
        "verdict": verdict,
        "note": note,
        "reviewed_at": now.isoformat(),
        "reviewed_by": reviewer,
        "receipt_id": receipt.id,
    }
    _write_review(session, op, document, now)
    append_transition(
        session,
        workspace_id=op.workspace_id,
        operation_id=op.id,
        from_state=op.state,
        to_state=op.state,
        verdict=verdict,
        reason=REVIEW_REASON,
        cause="review",
        now=now,
        details={
            "note": note,
            "reviewed_by": reviewer,
            "receipt_id": receipt.id,
            "follows": followed.id,
        },
    )
    return ReviewResult(receipt=receipt, follows=followed.id)


def review_queue(session: Session, *, workspace_id: str, limit: int = 200) -> list[Operation]:
    """Unreviewed operations a person decides, in the order a person should take them."""
    rank = case(
        (
            (Operation.state == OperationState.HUMAN_REVIEW.value)
            & (Operation.reason == LATE_CONTRADICTION),
            0,
        ),
        (Operation.state == OperationState.HUMAN_REVIEW.value, 1),
        (Operation.state == OperationState.CONTRADICTED.value, 2),
        else_=3,
    )
    return list(
        session.execute(
            select(Operation)
            .where(
                Operation.workspace_id == workspace_id,
                Operation.state.in_(REVIEWABLE_STATES),
                Operation.review.is_(None),
            )
            .order_by(rank, Operation.updated_at, Operation.id)
            .limit(limit)
        ).scalars()
    )


def receipt_history(session: Session, *, workspace_id: str, operation_id: str) -> list[Receipt]:
    """The operation's receipts, oldest first (each names the one it supersedes)."""
    return list(
        session.execute(
            select(Receipt)
            .where(Receipt.operation_id == operation_id, Receipt.workspace_id == workspace_id)
            .order_by(Receipt.created_at, Receipt.id)
        ).scalars()
    )
