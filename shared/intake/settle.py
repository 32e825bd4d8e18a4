"""What follows the links of correlated events, for every path that correlates: wake the open
operations they strongly link (``shared.lifecycle.scheduling.wake_for_events``, in the same
transaction: the operation's next observation is now; the caller dispatches the new fences after
commit), schedule a recheck of every watched VERIFIED operation the events name by a key they
carry, linked or not, or that a link to a final operation names (``shared.lifecycle.watch``,
dispatched with the wakes), name the new links whose event is older than its operation
(``shared.intake.ignored``, counted by the caller after commit), and take the events out of the
correlation backlog.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete
from sqlalchemy.orm import Session

from shared.db.models import EventBacklog
from shared.db.sql import one_of
from shared.intake.ignored import name_ignored
from shared.intake.results import Delivery, IntakeResult
from shared.lifecycle.scheduling import request_rechecks, wake_for_events
from shared.lifecycle.watch import rechecks_for_events

__all__ = ["settle"]


def settle(
    session: Session, pending: Sequence[tuple[Delivery, IntakeResult]], *, now: datetime
) -> None:
    """After the links of ``pending`` (each event with its result): fill each result's
    ``wakes`` and ``ignored``, schedule the rechecks (their fences join the first result's
    wakes) and mark the events correlated."""
    woken = dict(wake_for_events(session, {op for _, r in pending for op in r.to_wake}, now=now))
    for _, r in pending:
        r.wakes = [(op, woken[op]) for op in r.to_wake if op in woken]
    _recheck_watched(session, pending, now)
    name_ignored(session, [r for _, r in pending])
    _mark_correlated(session, [r.event_pk for _, r in pending if r.event_pk is not None])


def _recheck_watched(
    session: Session, pending: Sequence[tuple[Delivery, IntakeResult]], now: datetime
) -> None:
    """Schedule a recheck of every watched VERIFIED operation the events name by a key they
    carry (``shared.lifecycle.watch``); the fences join the first result's wakes (dispatched with
    the others after commit)."""
    named = set(
        rechecks_for_events(
            session,
            [(d.workspace_id, d.provider, d.event.type, d.event.keys.values()) for d, _ in pending],
            now=now,
        )
    )
    # A link to a final operation names it too (an operation verified before the watch keys
    # existed has a watch_until but no keys: migration 0008).
    named.update(link.operation_id for _, r in pending for link in r.links if link.final)
    if named:
        pending[0][1].wakes.extend(request_rechecks(session, named, now=now))


def _mark_correlated(session: Session, event_pks: Sequence[int]) -> None:
    """The events leave the correlation backlog (the event rows themselves are not written)."""
    if event_pks:
        session.execute(
            delete(EventBacklog)
            .where(one_of(session, EventBacklog.event_pk, sorted(set(event_pks))))
            .execution_options(synchronize_session=False)
        )
