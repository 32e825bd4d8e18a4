"""What a receipt cites: its conditions, its correlation and its evidence, read from the record.

:func:`receipt_evidence` lists the readbacks by their digest and expands each webhook reading
into one entry per stored event it counted (the reading's own digest when an event cannot be
found), in two queries whatever the number of channels; the decision's latest readings, when
the caller read them in the same transaction, spare the second read. :func:`as_utc` and
:func:`parse_time` are the time readings every receipt module shares.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from shared.core.contract import canonical_json
from shared.core.receipt import ReceiptEvidence
from shared.core.types import ConditionResult

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from shared.db.models import Operation

__all__ = [
    "as_utc",
    "parse_time",
    "receipt_conditions",
    "receipt_correlation",
    "receipt_evidence",
]


def as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return as_utc(value)
    if isinstance(value, str) and value:
        try:
            return as_utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return None
    return None


def receipt_conditions(decision: Mapping[str, Any]) -> list[ConditionResult]:
    found: list[ConditionResult] = []
    for item in decision.get("conditions") or ():
        if isinstance(item, Mapping) and isinstance(item.get("id"), str):
            holds = item.get("holds")
            found.append(
                ConditionResult(
                    id=item["id"],
                    kind=str(item.get("kind", "")),
                    holds=holds if isinstance(holds, bool) else None,
                    observed=item.get("observed"),
                    expected=item.get("expected"),
                )
            )
    return found


def receipt_correlation(decision: Mapping[str, Any]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for item in decision.get("correlation") or ():
        if isinstance(item, Mapping):
            strategy, assurance = item.get("strategy"), item.get("assurance")
        elif isinstance(item, list | tuple) and len(item) >= 2:
            strategy, assurance = item[0], item[1]
        else:
            continue
        if isinstance(strategy, str) and isinstance(assurance, str):
            found.append((strategy, assurance))
    return found


def _counted(entry: Mapping[str, Any]) -> bool:
    """Evidence a receipt lists: what decided, and every usable reading that was evaluated."""
    return bool(entry.get("used")) or (entry.get("status") == "ok" and bool(entry.get("fresh")))


_WEBHOOK_READINGS: Any = None


def _webhook_readings_statement() -> Any:
    """Built once: the observations (channel, time, value) of some channels of an operation."""
    global _WEBHOOK_READINGS
    if _WEBHOOK_READINGS is None:
        from sqlalchemy import bindparam, select

        from shared.db.models import Observation

        table = Observation.__table__
        _WEBHOOK_READINGS = (
            select(table.c.channel, table.c.observed_at, table.c.value)
            .where(
                table.c.operation_id == bindparam("operation_id"),
                table.c.channel.in_(bindparam("channels", expanding=True)),
            )
            .order_by(table.c.observed_at, table.c.id)
        )
    return _WEBHOOK_READINGS


def _bodies_by_reading(
    rows: Iterable[Any], wanted: Sequence[tuple[str, datetime | None]]
) -> dict[tuple[str, datetime | None], list[Any]]:
    """The event bodies of ``rows`` (channel, observed_at, value; by time, then id) that the
    wanted readings name; ``(channel, None)`` names the channel's latest reading."""
    found: dict[tuple[str, datetime | None], list[Any]] = {}
    for channel, observed_at, value in rows:
        bodies = value.get("events") if isinstance(value, Mapping) else None
        if not isinstance(bodies, list):
            continue
        if (channel, observed_at) in wanted:
            found[(channel, observed_at)] = bodies
        if (channel, None) in wanted:
            found[(channel, None)] = bodies  # no time given: the latest reading
    return found


def _from_latest(
    latest: Sequence[Any], wanted: Sequence[tuple[str, datetime | None]]
) -> dict[tuple[str, datetime | None], list[Any]] | None:
    """What :func:`_webhook_readings` answers, taken from the latest readings of each channel
    (the rows the decision was made from, ordered by id), or None when they cannot tell.

    Every stored reading of a channel at its latest time is among them, so a wanted reading at
    that time gets the same bodies; a reading at an earlier time, or a channel whose latest
    readings hold no events, needs the query."""
    newest: dict[str, datetime] = {}
    for row in latest:
        if row.channel not in newest or row.observed_at > newest[row.channel]:
            newest[row.channel] = row.observed_at
    channels = {channel for channel, _ in wanted}
    rows = [
        (row.channel, row.observed_at, row.value)
        for row in latest
        if row.channel in channels and row.observed_at == newest[row.channel]
    ]
    found = _bodies_by_reading(rows, wanted)
    for channel, observed_at in wanted:
        if observed_at is None:
            if (channel, None) not in found:
                return None
        elif observed_at != newest.get(channel):
            return None
    return found


def _webhook_readings(
    session: Session,
    operation: Operation,
    wanted: Sequence[tuple[str, datetime | None]],
    latest: Sequence[Any] | None = None,
) -> dict[tuple[str, datetime | None], list[Any]]:
    """The event bodies each wanted webhook reading counted, by (channel, observed_at)."""
    if not wanted:
        return {}
    if latest is not None:
        known = _from_latest(latest, wanted)
        if known is not None:
            return known
    rows = session.execute(
        _webhook_readings_statement(),
        {"operation_id": operation.id, "channels": sorted({channel for channel, _ in wanted})},
    ).all()
    return _bodies_by_reading(rows, wanted)


def _stored_events(
    session: Session, operation: Operation, bodies: Sequence[Any]
) -> dict[int, list[Any]]:
    """Stored events that may be the given bodies: those linked to the operation and those
    whose provider id the bodies name; keyed by a hash of their canonical JSON."""
    from sqlalchemy import or_, select

    from shared.db.models import Event, OperationEvent

    ids = sorted(
        {b["id"] for b in bodies if isinstance(b, Mapping) and isinstance(b.get("id"), str)}
    )
    linked = select(OperationEvent.event_pk).where(OperationEvent.operation_id == operation.id)
    events = session.execute(
        select(Event).where(
            Event.workspace_id == operation.workspace_id,
            or_(Event.id.in_(linked), Event.event_id.in_(ids)),
        )
    ).scalars()
    by_body: dict[int, list[Any]] = {}
    for event in events:
        by_body.setdefault(_body_key(event.body), []).append(event)
    return by_body


def _body_key(body: Any) -> int:
    try:
        return hash(canonical_json(body))
    except (TypeError, ValueError):
        return 0


def receipt_evidence(
    session: Session,
    operation: Operation,
    decision: Mapping[str, Any],
    webhook: set[str],
    latest: Sequence[Any] | None = None,
) -> list[ReceiptEvidence]:
    """The receipt's evidence: readbacks by their digest, webhook readings expanded into one
    entry per stored event they counted (falling back to the reading's own digest when an
    event cannot be found). Two queries, whatever the number of channels."""
    entries = [e for e in decision.get("evidence") or () if isinstance(e, Mapping) and _counted(e)]
    wanted = [
        (str(e.get("channel")), parse_time(e.get("observed_at")))
        for e in entries
        if str(e.get("channel")) in webhook
    ]
    readings = _webhook_readings(session, operation, wanted, latest)
    all_bodies = [b for bodies in readings.values() for b in bodies]
    stored = _stored_events(session, operation, all_bodies) if all_bodies else {}
    found: list[ReceiptEvidence] = []
    for entry in entries:
        channel, level = str(entry.get("channel")), str(entry.get("level"))
        observed_at = parse_time(entry.get("observed_at"))
        bodies = readings.get((channel, observed_at)) if channel in webhook else None
        if bodies:
            matches = [
                next((e for e in stored.get(_body_key(b), []) if e.body == b), None) for b in bodies
            ]
            if all(m is not None for m in matches):
                found.extend(
                    ReceiptEvidence(
                        channel=channel,
                        level=level,
                        observed_at=m.received_at,
                        provider_timestamp=m.provider_timestamp,
                        digest=m.digest,
                    )
                    for m in matches
                    if m is not None
                )
                continue
        digest = entry.get("digest")
        found.append(
            ReceiptEvidence(
                channel=channel,
                level=level,
                observed_at=observed_at,
                provider_timestamp=parse_time(entry.get("provider_timestamp")),
                digest=digest if isinstance(digest, str) else None,
            )
        )
    return found
