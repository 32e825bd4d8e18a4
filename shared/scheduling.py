"""Durable observation schedule and wake-ups (owned by issue 5; placeholder until it lands)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from shared.db.models import Operation

__all__ = ["dispatch_observe", "schedule_observation", "wake"]


def schedule_observation(
    session: Session, operation: Operation, *, delay_ms: int, now: datetime
) -> int:
    """Set ``next_observation_at`` and a new fence in the caller's transaction; return the fence."""
    raise NotImplementedError


def dispatch_observe(operation_id: str, fence: int, *, countdown_s: float) -> None:
    """Send the ``observe`` message; call only after the transaction that scheduled it commits."""
    raise NotImplementedError


def wake(session: Session, operation_id: str, *, now: datetime) -> int | None:
    """Move the next observation of an open operation to now; return the fence to dispatch."""
    raise NotImplementedError
