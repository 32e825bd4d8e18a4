"""The webhook channel's reduction of stored provider events.

This module owns :func:`reduce_events`: from the verified events stored for a workspace it
keeps those that belong to one webhook channel of one operation and returns the value that
``$observed.<channel>.*`` reads::

    {events, count, latest, earliest, types, duplicates_dropped, unsupported}

Steps, each independent of arrival order (deduplication, step 3, runs first):

1. keep events whose type is one of the channel's ``event_types`` and whose every match rule
   is true (three-valued over ``$event.*`` = the event body; unknown does not count);
2. drop events older than the operation, compared at whole-second precision (providers write
   whole seconds), unless the channel sets ``include_before_operation``;
3. deduplicate on the provider event id (records that share an id but differ, which a
   provider should never send, resolve to one of them chosen by content, not by order);
4. set aside events whose API version (``EventRecord.api_version``, else the body's
   ``api_version``) is not one of the contract's provider API versions: they are counted in
   ``unsupported`` and nothing reads them (an empty version list accepts every version);
5. order by ``(provider timestamp, event id)`` for ``events``. Providers stamp whole seconds,
   so several events often share a timestamp; the event id places them in the list, stably
   and never by arrival, but it says nothing about which came first.
6. ``latest`` and ``earliest`` are not chosen inside a second: they are the body of the one
   event of the latest (earliest) whole second, or, when several events share that second,
   their *agreement* — every field on which they all agree keeps its value, every field on
   which they disagree (a different value, a different type, present in some and absent in
   others) becomes ``{"$unknown": "tied"}`` (``shared.core.expressions.UNKNOWN_MARK``), which
   a condition reads as unknown. So ``latest.data.object.status`` is known when the tied
   events share it and unknown when one says ``succeeded`` and another ``failed``; no order of
   the deliveries, and no event id, can change the answer.

``duplicates_dropped`` counts, for the events the channel keeps, the repeated records of the
same event id in the input plus their ``duplicates`` counters (deliveries the intake already
answered as repeats).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from shared.core import ChannelError
from shared.core.contract import Channel, MatchRule
from shared.core.expressions import (
    UNKNOWN_MARK,
    EvaluationContext,
    Expression,
    Operand,
    compile_operand,
)
from shared.core.expressions import compile_expression as _compile
from shared.core.ignored import event_api_version
from shared.core.operators import evaluate
from shared.core.types import EventRecord
from shared.core.verifiers import verifier_of

__all__ = ["reduce_events"]

_SECOND: Final = timedelta(seconds=1)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _whole_second(value: datetime) -> int:
    return (_utc(value) - _EPOCH) // _SECOND


def _compile_rules(rules: Iterable[MatchRule]) -> list[tuple[Expression, Any, Operand]]:
    return [(_compile(rule.path), rule.op, compile_operand(rule.value)) for rule in rules]


def reduce_events(
    channel: Channel,
    events: Iterable[EventRecord],
    *,
    context: EvaluationContext,
    operation_created_at: datetime,
    api_versions: Sequence[str] = (),
) -> dict[str, Any]:
    """Reduce stored events to the observed value of a webhook ``channel``.

    ``context`` supplies ``$correlation``, ``$input`` and ``$operation`` to the match rules;
    ``$event`` is bound to each event's body in turn. Raises ``ChannelError`` when the
    channel has no webhook verifier.
    """
    verifier = channel.webhook
    if not verifier_of(channel).reduces_events or verifier is None:
        raise ChannelError(f"channel {channel.name!r} is not a webhook channel")
    types = frozenset(verifier.event_types)
    rules = _compile_rules(verifier.match)
    start = _whole_second(operation_created_at)
    accepted = frozenset(api_versions)

    groups: dict[str, list[EventRecord]] = {}
    for event in events:
        groups.setdefault(event.event_id, []).append(event)

    kept: list[EventRecord] = []
    unsupported = 0
    repeated = 0
    for group in groups.values():
        event = group[0] if len(group) == 1 else min(group, key=_content_key)
        if event.type not in types:
            continue
        if not verifier.include_before_operation and (
            _whole_second(event.provider_timestamp) < start
        ):
            continue
        scoped = context.with_event(event.body)
        truths = [
            evaluate(op, path.resolve(scoped), operand.resolve(scoped))
            for path, op, operand in rules
        ]
        if False in truths:
            continue
        if accepted and event_api_version(event) not in accepted:
            unsupported += 1
            continue
        if None in truths:
            continue
        kept.append(event)
        repeated += len(group) - 1

    ordered = sorted(kept, key=_order_key)
    bodies = [event.body for event in ordered]
    return {
        "events": bodies,
        "count": len(bodies),
        "latest": _agreement(_same_second(reversed(ordered))),
        "earliest": _agreement(_same_second(ordered)),
        "types": sorted({event.type for event in ordered}),
        "duplicates_dropped": repeated + sum(event.duplicates for event in ordered),
        "unsupported": unsupported,
    }


def _same_second(ordered: Iterable[EventRecord]) -> list[Any]:
    """The bodies of the first events of ``ordered`` that share its first event's whole
    second (empty when there are no events)."""
    bodies: list[Any] = []
    second: int | None = None
    for event in ordered:
        stamp = _whole_second(event.provider_timestamp)
        if second is not None and stamp != second:
            break
        second = stamp
        bodies.append(event.body)
    return bodies


def _agreement(bodies: Sequence[Any]) -> Any:
    """What tied event bodies agree on (step 6); the body itself when there is one."""
    if not bodies:
        return None
    if len(bodies) == 1:
        return bodies[0]
    return _agree(bodies)


def _agree(values: Sequence[Any]) -> Any:
    first = values[0]
    if all(type(value) is dict for value in values):
        keys = sorted(set().union(*values))
        return {
            key: _agree([value[key] for value in values])
            if all(key in value for value in values)
            else _tied()
            for key in keys
        }
    if all(type(value) is list for value in values) and len({len(v) for v in values}) == 1:
        return [_agree(items) for items in zip(*values, strict=True)]
    if all(type(value) is type(first) and value == first for value in values):
        return first
    return _tied()


def _tied() -> dict[str, str]:
    return {UNKNOWN_MARK: "tied"}


def _order_key(event: EventRecord) -> tuple[datetime, str]:
    return _utc(event.provider_timestamp), event.event_id


def _content_key(event: EventRecord) -> tuple[datetime, str, str, str]:
    """Picks one record among records that share an event id but not their content (which a
    provider should never send): the choice depends on the records, never on their order."""
    body = json.dumps(event.body, sort_keys=True, separators=(",", ":"), default=str)
    return _utc(event.provider_timestamp), event.type, event.api_version or "", body
