"""What the agent API does to an operation a person decides: record the review, once, and
answer with its signed receipt (``shared.lifecycle.review.record_review``).

Works in the caller's transaction; a review refused by the lifecycle is a 409.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from services.ingress.api.lookup import state_conflict
from services.ingress.api.schemas import ReviewIn
from shared.db.models import Operation
from shared.lifecycle.review import ReviewRefused, ReviewResult
from shared.lifecycle.review import record_review as record
from shared.runtime.settings import Settings

__all__ = ["record_review"]


def record_review(
    session: Session,
    op: Operation,
    review: ReviewIn,
    *,
    reviewer_key_id: str,
    now: datetime,
    settings: Settings | None = None,
) -> ReviewResult:
    """Record a person's review (see ``shared.lifecycle.review``); 409 when it is refused."""
    try:
        return record(
            session,
            op,
            verdict=review.verdict,
            note=review.note,
            reviewer=reviewer_key_id,
            now=now,
            settings=settings,
        )
    except ReviewRefused as exc:
        raise state_conflict(op, str(exc)) from None
