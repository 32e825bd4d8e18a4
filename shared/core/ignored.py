"""Why a stored event counts for nothing in one operation, and the sentence that says so.

An event can be verified, stored and strongly linked to an operation and still be read by none
of its contract's webhook channels (``shared.core.events.reduce_events`` sets it aside). Left
unsaid, that is a silent PENDING for days. :func:`why_ignored` names the first of these
reasons that applies, in this order:

- ``api_version``: its API version is not one of the contract's ``provider_api_versions``
  (a Stripe endpoint created on another version than the contract's sends every event so);
- ``before_operation``: every channel that reads its type drops events older than the
  operation (whole seconds, as the reduction compares them), and it is older;
- ``type_unread``: no webhook channel of the contract reads its type.

:func:`ignored_summary` groups the ignored events of an operation into the sentence an agent
or a person reads (``3 events ignored: api_version 2025-03-31.basil is not among 2026-08-26``).
Nothing here decides anything: the engine's reduction stays the one that counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from shared.core.contract import Contract
from shared.core.types import EventRecord

__all__ = [
    "API_VERSION",
    "BEFORE_OPERATION",
    "TYPE_UNREAD",
    "IgnoredEvent",
    "event_api_version",
    "ignored_summary",
    "why_ignored",
]

API_VERSION: Final = "api_version"
BEFORE_OPERATION: Final = "before_operation"
TYPE_UNREAD: Final = "type_unread"

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND: Final = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class IgnoredEvent:
    """One stored event that counts for nothing in an operation, and why (``detail``: a
    phrase naming what does not match)."""

    event_id: str
    type: str
    reason: str
    detail: str


def event_api_version(event: EventRecord) -> str | None:
    """The event's API version: the stored column, else the body's ``api_version``."""
    if event.api_version is not None:
        return event.api_version
    value = event.body.get("api_version") if isinstance(event.body, dict) else None
    return value if isinstance(value, str) else None


def _whole_second(value: datetime) -> int:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return (aware - _EPOCH) // _SECOND


def _versions_text(versions: Iterable[str]) -> str:
    return ", ".join(versions)


def why_ignored(
    contract: Contract, *, event: EventRecord, operation_created_at: datetime
) -> IgnoredEvent | None:
    """The reason ``event`` counts for nothing in an operation under ``contract`` created at
    ``operation_created_at``; ``None`` when a channel may read it (its match rules decide)."""
    readers = [
        channel.webhook
        for channel in contract.channels
        if channel.webhook is not None and event.type in channel.webhook.event_types
    ]
    versions = contract.provider_api_versions
    version = event_api_version(event)
    if readers and versions and version not in versions:
        shown = version if version is not None else "(none)"
        return IgnoredEvent(
            event.event_id,
            event.type,
            API_VERSION,
            f"api_version {shown} is not among {_versions_text(versions)}",
        )
    if readers and all(
        not reader.include_before_operation
        and _whole_second(event.provider_timestamp) < _whole_second(operation_created_at)
        for reader in readers
    ):
        return IgnoredEvent(
            event.event_id,
            event.type,
            BEFORE_OPERATION,
            "the event is older than the operation",
        )
    if not readers:
        return IgnoredEvent(
            event.event_id,
            event.type,
            TYPE_UNREAD,
            f"no channel of {contract.id} reads {event.type}",
        )
    return None


def ignored_summary(ignored: Iterable[IgnoredEvent], *, include_unread: bool) -> str | None:
    """One sentence per reason and detail, most events first (``None``: nothing to say).

    ``include_unread`` false leaves out events of a type no channel reads (an operation that
    is waiting is not waiting for those)."""
    groups: dict[str, int] = {}
    for item in ignored:
        if item.reason == TYPE_UNREAD and not include_unread:
            continue
        groups[item.detail] = groups.get(item.detail, 0) + 1
    if not groups:
        return None
    parts = [
        f"{n} event{'s' if n != 1 else ''} ignored: {detail}"
        for detail, n in sorted(groups.items(), key=lambda g: (-g[1], g[0]))
    ]
    return "; ".join(parts)
