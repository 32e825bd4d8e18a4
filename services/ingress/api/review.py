"""What the agent API does to an operation in HUMAN_REVIEW: record a person's resolution, once.

Works in the caller's transaction; the review is written with the operation's version guard.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from services.ingress.api.lookup import state_conflict
from services.ingress.api.schemas import ReviewIn
from shared.core.types import OperationState
from shared.db.audit import append_transition
from shared.db.models import Operation

__all__ = ["record_review"]


def record_review(
    session: Session, op: Operation, review: ReviewIn, *, reviewer_key_id: str, now: datetime
) -> None:
    """Record a person's resolution of HUMAN_REVIEW: once, never overwritten."""
    if op.state != OperationState.HUMAN_REVIEW:
        raise state_conflict(
            op, f"only an operation in HUMAN_REVIEW is reviewed (state {op.state})"
        )
    if op.review is not None:
        raise state_conflict(
            op, "the operation was already reviewed; a review is never overwritten"
        )
    document = {
        "verdict": review.verdict,
        "note": review.note,
        "reviewed_at": now.isoformat(),
        "reviewed_by": reviewer_key_id,
    }
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
        raise state_conflict(
            op, "the operation changed while the review was recorded; read it again"
        )
    set_committed_value(op, "review", document)
    set_committed_value(op, "version", op.version + 1)
    set_committed_value(op, "updated_at", now)
    append_transition(
        session,
        workspace_id=op.workspace_id,
        operation_id=op.id,
        from_state=op.state,
        to_state=op.state,
        verdict=review.verdict,
        reason="human_review_resolved",
        cause="review",
        now=now,
        details={"note": review.note, "reviewed_by": reviewer_key_id},
    )
