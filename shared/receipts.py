"""Signed receipts for final verdicts (owned by issue 7; placeholder until it lands)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from shared.db.models import Operation, Receipt

__all__ = ["issue_receipt"]


def issue_receipt(session: Session, operation: Operation, *, now: datetime) -> Receipt:
    """Sign and store the receipt of ``operation``'s final verdict (in the caller's transaction)."""
    raise NotImplementedError("receipts are not implemented yet")
