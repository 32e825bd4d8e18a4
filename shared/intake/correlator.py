"""The correlator: links stored webhook events with their operations, after the intake has
answered the provider. One function, :func:`correlate_pending`, that the observer's
``provely.correlate`` task and the sweeper both run; it lives here, not in either service, so
that no service imports another.

The intake (``services.ingress.intake.webhooks``) only verifies, stores and commits; after a
batch it commits, a ``provely.correlate`` message (queue ``correlate``) asks for its events (at
most one each 100 ms under a stream of batches). A worker that takes the message
(``services.observer.tasks.correlate``) runs :func:`correlate_pending`: it claims the events
nobody has correlated yet (rows of ``event_backlog``, ``FOR UPDATE SKIP LOCKED``), links them
with the operations they name, wakes the open ones they strongly correlate with, commits, and
only then counts the links it made to events older than their operation
(``shared.intake.ignored``) and sends the ``observe`` messages of the wakes. Messages coalesce:
one run takes every pending event, so a message that finds nothing left costs one indexed
query. Wakes coalesce too: an operation whose due message no observer has begun to read keeps
it (``shared.lifecycle.scheduling.wake_for_events``), so a burst of events for one operation
costs one message per reading, not one per event.

Nothing is lost when a message is: the marker is in PostgreSQL, and the sweeper correlates
events still pending after its grace (``services.verdict.sweeper``). An event that names a
watched VERIFIED operation by a key it carries schedules a recheck of it
(``shared.lifecycle.watch``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from shared.db.session import session_scope
from shared.intake.backlog import correlate_backlog
from shared.intake.ignored import count_ignored
from shared.lifecycle import messages

__all__ = ["BATCH", "MAX_ROUNDS", "correlate_pending"]

log = logging.getLogger(__name__)

BATCH = 256
"""Events one transaction correlates."""
MAX_ROUNDS = 64
"""Transactions one run goes through before it returns (later messages carry on)."""


def correlate_pending(
    engine: Engine,
    *,
    batch: int = BATCH,
    max_rounds: int = MAX_ROUNDS,
    received_before: timedelta | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    send_observe: Callable[[str, int, float], object] | None = None,
) -> int:
    """Correlate the events that wait for it, ``batch`` per transaction, until none is left
    (or ``max_rounds`` transactions); only events older than ``received_before`` when given.
    Returns how many events were correlated. The wakes' ``observe`` messages go through
    ``send_observe(operation_id, fence, countdown)`` after each commit (default: all of a
    transaction's at once, ``messages.observe_many``)."""
    total = 0
    for _ in range(max_rounds):
        now = clock()
        cutoff = None if received_before is None else now - received_before
        with session_scope(engine) as session:
            results = correlate_backlog(session, now=now, limit=batch, received_before=cutoff)
        count_ignored(results)
        wakes = sorted({w for r in results for w in r.wakes})
        if send_observe is None:
            messages.observe_many(wakes)
        else:
            for operation_id, fence in wakes:
                send_observe(operation_id, fence, 0.0)
        total += len(results)
        if len(results) < batch:
            break
    if total:
        log.debug("correlated %d events", total)
    return total
