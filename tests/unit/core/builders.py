"""Builders for the core's unit tests: the Stripe contracts, operation facts, observations.

The only I/O in the core's tests is reading the contract YAML files, once.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from shared.core.context import build_context
from shared.core.contract import Contract
from shared.core.events import reduce_events
from shared.core.types import EventRecord, Observation, ObservationStatus, OperationFacts

ROOT = Path(__file__).resolve().parents[3]
API_VERSION = "2026-08-26"

# The operation starts 0.4 s into a second; Stripe's ``created`` is whole seconds.
T0 = datetime(2026, 9, 10, 12, 0, 0, 400_000, tzinfo=UTC)
T0_EPOCH = int(T0.timestamp())  # the same second, truncated
NOW = T0 + timedelta(minutes=2)
INPUT = {"charge": "ch_1", "amount": 500, "currency": "usd"}
REFUND_ID = "re_1"


@cache
def load(name: str = "refund.succeeded") -> Contract:
    path = ROOT / "contracts" / "stripe" / f"{name}.yaml"
    return Contract.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))


def variant(base: Contract | None = None, **changes: Any) -> Contract:
    """A copy of ``base`` (default stripe.refund.succeeded) with top-level members replaced."""
    document = (base or load()).document()
    document.update(changes)
    return Contract.model_validate(document)


def facts(**overrides: Any) -> OperationFacts:
    values: dict[str, Any] = {
        "id": "op_1",
        "created_at": T0,
        "input": dict(INPUT),
        "action_result": {"id": REFUND_ID, "object": "refund", "status": "pending"},
        "action_reported_at": T0 + timedelta(milliseconds=300),
    }
    values.update(overrides)
    return OperationFacts(**values)


def refund(**overrides: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "id": REFUND_ID,
        "object": "refund",
        "status": "succeeded",
        "amount": 500,
        "currency": "usd",
        "charge": "ch_1",
        "created": T0_EPOCH,
    }
    value.update(overrides)
    return value


def readback(
    *,
    age_s: float = 1.0,
    obs_status: ObservationStatus = ObservationStatus.OK,
    now: datetime = NOW,
    value: dict[str, Any] | None = None,
    **fields: Any,
) -> Observation:
    return Observation(
        channel="refund_readback",
        observed_at=now - timedelta(seconds=age_s),
        status=obs_status,
        value=(value if value is not None else refund(**fields))
        if obs_status is ObservationStatus.OK
        else None,
        digest="sha256:readback",
    )


def event(
    event_id: str,
    type_: str = "refund.updated",
    *,
    at: datetime | None = None,
    api_version: str | None = API_VERSION,
    duplicates: int = 0,
    **object_fields: Any,
) -> EventRecord:
    timestamp = at if at is not None else T0 + timedelta(seconds=5)
    obj = {"id": REFUND_ID, "object": "refund", "status": "succeeded", "charge": "ch_1"}
    obj.update(object_fields)
    return EventRecord(
        event_id=event_id,
        type=type_,
        provider_timestamp=timestamp,
        body={
            "id": event_id,
            "type": type_,
            "created": int(timestamp.timestamp()),
            "api_version": api_version,
            "data": {"object": obj},
        },
        api_version=api_version,
        duplicates=duplicates,
    )


def webhook(
    channel: str,
    events: Iterable[EventRecord],
    *,
    contract: Contract | None = None,
    operation: OperationFacts | None = None,
    age_s: float = 0.5,
    now: datetime = NOW,
) -> Observation:
    """An observation of a webhook channel: the reduction of ``events`` at ``now - age_s``."""
    contract = contract or load()
    operation = operation or facts()
    spec = contract.channel(channel)
    assert spec is not None
    value = reduce_events(
        spec,
        events,
        context=build_context(contract, operation),
        operation_created_at=operation.created_at,
        api_versions=contract.provider_api_versions,
    )
    return Observation(channel, now - timedelta(seconds=age_s), ObservationStatus.OK, value)


def succeeded_event(**fields: Any) -> Observation:
    return webhook("refund_succeeded_events", [event("evt_upd_1", **fields)])


def created_events(count: int) -> Observation:
    return webhook(
        "refund_created_events",
        [event(f"evt_cr_{i}", "refund.created", id=f"re_{i + 1}") for i in range(count)],
    )


def verified_set(**readback_fields: Any) -> list[Observation]:
    """The observations that verify stripe.refund.succeeded, readback fields overridable."""
    return [readback(**readback_fields), succeeded_event(), created_events(1)]
