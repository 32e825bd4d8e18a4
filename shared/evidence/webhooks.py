"""The ``webhook`` verifier: the provider's stored events of one operation (evidence level E3).

Events were verified, deduplicated and stored by the webhook intake, with the correlation keys
each one carries (``event_keys``) and the operations it correlated with (``operation_events``).
This verifier loads the candidates of one channel — events of the channel's types that are
linked to the operation, or that carry one of the operation's known key values (its id, the
subject id, learned keys, the correlation keys' values, the values the channel's match rules
compare with such as ``$input.charge``) — and hands them to
the core's ``reduce_events``, which applies the channel's match rules (three-valued: only true
counts), drops events older than the operation, deduplicates on the event id, orders by the
provider's timestamp and sets aside events of an unsupported API version. Loading more
candidates than strictly needed is safe: the match rules decide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import bindparam, or_, select
from sqlalchemy.orm import Session

from shared.core.contract import Channel, Contract, WebhookVerifier, canonical_json
from shared.core.events import reduce_events
from shared.core.expressions import EvaluationContext, resolve
from shared.core.types import EventRecord, ObservationStatus
from shared.core.verifiers import verifier_of
from shared.db.models import Event, EventKey, Operation, OperationEvent
from shared.evidence.readings import Reading, digest_of

__all__ = [
    "MAX_EVENTS",
    "channel_key_values",
    "evidence_keys",
    "known_key_values",
    "load_events",
    "read_webhook",
]

MAX_EVENTS = 500
"""The most events one reading loads (the newest by provider timestamp)."""


def known_key_values(op: Operation, correlation: dict[str, Any]) -> set[str]:
    """The values an event may carry to be a candidate for ``op``."""
    values: set[str] = {op.id}
    if op.subject_id:
        values.add(op.subject_id)
    for source in (correlation, op.learned_keys or {}):
        for value in source.values():
            if isinstance(value, str) and value:
                values.add(value)
    return values


def channel_key_values(
    op: Operation, verifier: WebhookVerifier, context: EvaluationContext
) -> set[str]:
    """The key values a webhook channel of ``op`` finds its candidate events by: the
    operation's known values and what the channel's match rules compare events with
    (``$input.charge`` …), so correlation lag never hides an event the rules would match."""
    values = known_key_values(op, dict(context.correlation))
    for rule in verifier.match:
        operand = resolve(rule.value, context)
        if isinstance(operand, str) and operand:
            values.add(operand)
    return values


def evidence_keys(
    op: Operation, contract: Contract, context: EvaluationContext
) -> dict[str, tuple[set[str], set[str]]]:
    """Per provider, the key values and event types the contract's webhook channels read:
    what a decision locks (``shared.evidence.locks``) and what a watch indexes."""
    found: dict[str, tuple[set[str], set[str]]] = {}
    for channel in contract.channels:
        if not verifier_of(channel).reduces_events or channel.webhook is None:
            continue
        values, types = found.setdefault(channel.provider_of(contract), (set(), set()))
        values.update(v for v in channel_key_values(op, channel.webhook, context) if len(v) <= 255)
        types.update(channel.webhook.event_types)
    return found


_EVENTS = Event.__table__
_EVENT_KEYS = EventKey.__table__
_OPERATION_EVENTS = OperationEvent.__table__

# Built once: constructing this statement and its cache key costs more than running it. Core
# columns: the rows are read as they are, no ORM loading.
_CANDIDATE_EVENTS = (
    select(
        _EVENTS.c.event_id,
        _EVENTS.c.type,
        _EVENTS.c.provider_timestamp,
        _EVENTS.c.body,
        _EVENTS.c.api_version,
        _EVENTS.c.received_at,
        _EVENTS.c.duplicates,
    )
    .where(
        _EVENTS.c.workspace_id == bindparam("workspace_id"),
        _EVENTS.c.provider == bindparam("provider"),
        _EVENTS.c.type.in_(bindparam("types", expanding=True)),
        or_(
            _EVENTS.c.id.in_(
                select(_OPERATION_EVENTS.c.event_pk).where(
                    _OPERATION_EVENTS.c.operation_id == bindparam("operation_id")
                )
            ),
            _EVENTS.c.id.in_(
                select(_EVENT_KEYS.c.event_pk).where(
                    _EVENT_KEYS.c.workspace_id == bindparam("workspace_id"),
                    _EVENT_KEYS.c.provider == bindparam("provider"),
                    _EVENT_KEYS.c.value.in_(bindparam("values", expanding=True)),
                )
            ),
        ),
    )
    .order_by(_EVENTS.c.provider_timestamp.desc(), _EVENTS.c.event_id.desc())
    .limit(MAX_EVENTS)
)


def load_events(
    session: Session,
    op: Operation,
    *,
    provider: str,
    event_types: Iterable[str],
    key_values: Iterable[str],
) -> list[EventRecord]:
    """Candidate events of ``op`` for one channel, as the core's :class:`EventRecord`."""
    params = {
        "operation_id": op.id,
        "workspace_id": op.workspace_id,
        "provider": provider,
        "types": sorted(set(event_types)),
        "values": sorted(set(key_values)),
    }
    rows = session.execute(_CANDIDATE_EVENTS, params).all()
    return [
        EventRecord(
            event_id=row.event_id,
            type=row.type,
            provider_timestamp=row.provider_timestamp,
            body=row.body,
            api_version=row.api_version,
            received_at=row.received_at,
            duplicates=row.duplicates or 0,
        )
        for row in rows
    ]


def read_webhook(
    session: Session,
    op: Operation,
    *,
    contract: Contract,
    channel: Channel,
    context: EvaluationContext,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Reading:
    """Reduce the stored events of ``channel`` for ``op`` into one reading."""
    import time

    started = time.monotonic()
    verifier = channel.webhook
    if verifier is None:
        return Reading(
            channel=channel.name,
            status=ObservationStatus.ERROR,
            observed_at=clock(),
            error="channel_without_webhook_verifier",
        )
    values = channel_key_values(op, verifier, context)
    events = load_events(
        session,
        op,
        provider=channel.provider_of(contract),
        event_types=verifier.event_types,
        key_values=values,
    )
    value = reduce_events(
        channel,
        events,
        context=context,
        operation_created_at=op.created_at,
        api_versions=contract.provider_api_versions,
    )
    raw = canonical_json(value)
    bodies = value.get("events") or []
    provider_timestamp = None
    if bodies:  # the latest event's timestamp (``latest`` may be what tied events agree on)
        kept = [e for e in events if e.body is bodies[-1]]
        provider_timestamp = kept[0].provider_timestamp if kept else None
    return Reading(
        channel=channel.name,
        status=ObservationStatus.OK,
        observed_at=clock(),
        value=value,
        raw=raw,
        digest=digest_of(raw),
        provider_timestamp=provider_timestamp,
        latency_ms=(time.monotonic() - started) * 1000.0,
    )
