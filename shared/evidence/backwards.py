"""Readbacks that go backwards: a new reading is judged against this operation's earlier ones.

Where a channel declares its provider's lifecycle monotone (``Channel.monotone``), the
observer passes its new readings through :func:`mark_backwards` in the transaction that
stores them: a reading that goes backwards against an earlier ``ok`` reading of the same
operation and channel (``shared.core.consistency``) is stored with status ``inconsistent``
and the rule it broke as its ``error``, its value kept for the record. The engine reads such a
channel as unknown, so the reading neither decides nor settles a recheck; the runtime reads
again on the contract's schedule.

Earlier inconsistent readings are never a baseline: only ``ok`` readings are compared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from shared.core.consistency import backwards
from shared.core.contract import Contract
from shared.core.types import ObservationStatus
from shared.db.models import Observation
from shared.evidence.readings import Reading

__all__ = ["mark_backwards"]


def mark_backwards(
    session: Session, *, operation_id: str, contract: Contract, readings: Sequence[Reading]
) -> list[Reading]:
    """``readings`` with every one that goes backwards re-marked ``inconsistent``."""
    judged = {
        ch.name: ch
        for ch in contract.channels
        if ch.monotone is not None and any(r.channel == ch.name for r in readings)
    }
    if not judged:
        return list(readings)
    earlier: dict[str, list[Any]] = {name: [] for name in judged}
    rows = session.execute(
        select(Observation.channel, Observation.value).where(
            Observation.operation_id == operation_id,
            Observation.status == ObservationStatus.OK.value,
            Observation.channel.in_(sorted(judged)),
        )
    ).all()
    for channel, value in rows:
        earlier[channel].append(value)
    marked: list[Reading] = []
    for reading in readings:
        channel = judged.get(reading.channel)
        why = (
            backwards(
                channel,
                earlier=earlier[reading.channel],
                status=reading.status.value,
                value=reading.value,
            )
            if channel is not None
            else None
        )
        if why is None:
            marked.append(reading)
        else:
            marked.append(
                dataclasses.replace(reading, status=ObservationStatus.INCONSISTENT, error=why)
            )
    return marked
