"""Readings that go backwards: a readback is judged against this operation's earlier readings.

A provider's reads can lag (a read replica, a cache): a refund read a moment ago answers
not-found, a listing loses a refund it held, a status returns to ``pending``. Where the
provider's lifecycle only moves forward — which the contract states for each channel
(``Channel.monotone``) — such a reading is *inconsistent*: it is recorded, but it decides
nothing and settles nothing (the observation's status is ``inconsistent``, the engine reads the
channel as unknown and the runtime reads it again on the contract's schedule).

:func:`backwards` is pure: the caller passes the channel's earlier ``ok`` readings of the same
operation (their values) and the new reading's status and value. A reading is compared with
every earlier one, so one inconsistent reading is never the baseline of the next.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from shared.core.contract import Channel, Stages

__all__ = [
    "ITEM_LOST",
    "NOT_FOUND_AFTER_FOUND",
    "STAGE_WENT_BACK",
    "backwards",
]

NOT_FOUND_AFTER_FOUND: Final = "not_found_after_found"
"""A resource this operation read before answered not-found."""
ITEM_LOST: Final = "listed_item_lost"
"""A list reading no longer holds an item (by id) an earlier reading of it listed."""
STAGE_WENT_BACK: Final = "stage_went_back"
"""A field moved to an earlier stage of the provider's lifecycle than a reading showed."""


def backwards(
    channel: Channel,
    *,
    earlier: Iterable[Any],
    status: str,
    value: Any,
) -> str | None:
    """Why a new reading of ``channel`` goes backwards against ``earlier`` (values of the
    channel's earlier ``ok`` readings of the same operation); ``None`` when it does not, or
    when the channel declares no ``monotone`` rule. ``status`` is the new reading's status
    (``ok``, ``not_found``, …) and ``value`` its parsed value."""
    rule = channel.monotone
    if rule is None:
        return None
    before = list(earlier)
    if not before:
        return None
    if status == "not_found":
        return NOT_FOUND_AFTER_FOUND if rule.exists else None
    if status != "ok":
        return None
    if rule.keeps_items and _lost_item(before, value):
        return ITEM_LOST
    if rule.stages is not None and _went_back(rule.stages, before, value):
        return STAGE_WENT_BACK
    return None


def _item_ids(value: Any) -> set[str] | None:
    if not isinstance(value, Mapping):
        return None
    data = value.get("data")
    if not isinstance(data, Sequence) or isinstance(data, str | bytes):
        return None
    ids = set()
    for item in data:
        if isinstance(item, Mapping) and isinstance(item.get("id"), str):
            ids.add(item["id"])
    return ids


def _lost_item(before: list[Any], value: Any) -> bool:
    now = _item_ids(value)
    if now is None:
        return False
    for old in before:
        seen = _item_ids(old)
        if seen and not seen <= now:
            return True
    return False


def _field(value: Any, dotted: str) -> Any:
    for segment in dotted.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(segment)
    return value


def _stage(stages: Stages, value: Any) -> int | None:
    found = _field(value, stages.field)
    if not isinstance(found, str):
        return None
    for index, members in enumerate(stages.order):
        if found in members:
            return index
    return None


def _went_back(stages: Stages, before: list[Any], value: Any) -> bool:
    now = _stage(stages, value)
    if now is None:
        return False
    reached = [s for s in (_stage(stages, old) for old in before) if s is not None]
    return bool(reached) and max(reached) > now
