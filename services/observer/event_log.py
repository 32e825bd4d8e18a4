"""The ``event_log`` verifier's second half: the events an event-log reading found, handed to
the intake as deliveries are.

The observer reads the provider's event list like a paged readback (``jobs.event_log_job``,
``http_verifier.read_http_list``: the connection's key, the rate limit, every page). Here, in a
transaction of its own that commits before the operation's observations are stored and its
webhook channels reduced (the intake's evidence locks before any row lock, as a decision takes
them), each listed event is parsed by the provider's event shape and goes through
:func:`shared.intake.ingest.ingest_event`: stored once per (workspace, provider, event id) —
an event that was delivered too, before or after, is the same row and only its duplicate
counter moves — correlated, and its ignored and escaped copies recorded as for a delivery. So
a delivery that never came is recovered, and the webhook channels reduce the event like any
other stored one.

The channel's own observation is what the read found, never the events themselves:
``{"count": events listed, "new": events the record did not hold, "malformed": events the
shape could not read}``. An event the shape cannot read is counted and left out (a delivery
like it would have been refused). An event the record holds already is not handed to the
intake again: every poll lists the same events, and a re-read is not a repeat delivery (the
duplicate counter counts deliveries).
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from shared.core.contract import canonical_json
from shared.core.types import ObservationStatus
from shared.db.models import Event, Operation
from shared.evidence.readings import Reading, digest_of
from shared.intake.contracts import event_shape_for, fingerprint_key_names
from shared.intake.ingest import ingest_event
from shared.intake.parse import MalformedEvent, parse_event
from shared.trust.signatures import VerifiedDelivery

__all__ = ["LogIngest", "ingest_log"]


@dataclasses.dataclass(frozen=True, slots=True)
class LogIngest:
    """The channel's reading as stored, and the operations the new events woke."""

    reading: Reading
    wakes: list[tuple[str, int]]


def ingest_log(
    session: Session, op: Operation, *, provider: str, reading: Reading, now: datetime
) -> LogIngest:
    """Store every event of an ``ok`` event-log ``reading`` through the intake, in the
    caller's transaction; the reading comes back as its summary. Any other reading is kept
    as it is (an error, an unavailable provider: nothing was read)."""
    if reading.status is not ObservationStatus.OK or not isinstance(reading.value, dict):
        return LogIngest(reading, [])
    events = reading.value.get("data") or []
    held = _stored_ids(session, op.workspace_id, provider, events)
    shape = event_shape_for(provider, provider)
    extra = fingerprint_key_names(provider)
    verified = VerifiedDelivery(scheme="event_log", secret_index=-1)
    new = malformed = 0
    wakes: list[tuple[str, int]] = []
    for body in events:
        if body.get("id") in held:
            continue  # stored already (delivered, or read before): its duplicates stay as they are
        raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        try:
            event = parse_event(
                raw, shape=shape, delivery=verified, received_at=now, extra_keys=extra
            )
        except MalformedEvent:
            malformed += 1
            continue
        result = ingest_event(
            session,
            workspace_id=op.workspace_id,
            provider=provider,
            event=event,
            raw=raw,
            now=now,
        )
        if not result.duplicate:
            new += 1
            wakes.extend(w for w in result.wakes if w[0] != op.id)
    summary = {"count": len(events), "new": new, "malformed": malformed}
    raw_summary = canonical_json(summary)
    stored = dataclasses.replace(
        reading, value=summary, raw=raw_summary, digest=digest_of(raw_summary)
    )
    return LogIngest(stored, wakes)


def _stored_ids(
    session: Session, workspace_id: str, provider: str, events: list[dict[str, Any]]
) -> set[str]:
    """The ids of ``events`` the record holds already: a log read again at every poll lists
    them again, and is not a repeat delivery (it leaves the duplicate counter alone)."""
    ids = [e["id"] for e in events if isinstance(e.get("id"), str)]
    if not ids:
        return set()
    found = session.execute(
        select(Event.event_id).where(
            Event.workspace_id == workspace_id,
            Event.provider == provider,
            Event.event_id.in_(ids),
        )
    ).scalars()
    return set(found)
