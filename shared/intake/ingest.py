"""One delivery, every step: :func:`ingest_event` stores a verified event once
(``shared.intake.store``), correlates it (``shared.intake.correlate``) and settles it (wakes,
rechecks, out of the backlog: ``shared.intake.settle``), in the caller's transaction. The
webhook intake splits these steps instead (store, commit, answer; a correlator later).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from shared.intake.correlate import correlate_event
from shared.intake.parse import ParsedEvent
from shared.intake.results import Delivery, IntakeResult
from shared.intake.settle import settle
from shared.intake.store import store_event

__all__ = ["ingest_event"]


def ingest_event(
    session: Session,
    *,
    workspace_id: str,
    provider: str,
    event: ParsedEvent,
    raw: bytes,
    now: datetime,
) -> IntakeResult:
    """Store a verified event once, correlate it, and wake the open operations it names.

    On a repeat delivery only the duplicate counter moves; nothing is correlated or woken.
    The caller commits, then dispatches ``result.wakes``.
    """
    event_pk = store_event(
        session, workspace_id=workspace_id, provider=provider, event=event, raw=raw, now=now
    )
    if event_pk is None:
        return IntakeResult(event_pk=None, duplicate=True)
    result = correlate_event(
        session,
        event_pk=event_pk,
        workspace_id=workspace_id,
        provider=provider,
        event=event,
        now=now,
    )
    result.event_pk = event_pk
    settle(session, [(Delivery(workspace_id, provider, event, raw, now), result)], now=now)
    return result
