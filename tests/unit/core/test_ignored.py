"""Why a stored event counts for nothing in an operation, and the sentence that says so
(shared.core.ignored, #33): the README session with a Stripe endpoint on another API version
stayed PENDING awaiting_evidence for good, with nothing saying why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.core.contract import contract_hash
from shared.core.events import reduce_events
from shared.core.expressions import EvaluationContext
from shared.core.ignored import (
    API_VERSION,
    BEFORE_OPERATION,
    TYPE_UNREAD,
    ignored_summary,
    why_ignored,
)
from shared.core.lint.contract import lint_contract
from shared.core.types import EventRecord

from .builders import load, variant

CREATED = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
OTHER = "2025-03-31.basil"


def record(
    event_type: str = "refund.updated",
    *,
    api_version: str | None = "2026-08-26",
    at: datetime = CREATED + timedelta(seconds=5),
    event_id: str = "evt_1",
    body: dict[str, Any] | None = None,
) -> EventRecord:
    return EventRecord(
        event_id=event_id,
        type=event_type,
        provider_timestamp=at,
        body=body or {"data": {"object": {"id": "re_1", "status": "succeeded"}}},
        api_version=api_version,
    )


@pytest.mark.parametrize(
    ("event", "reason", "detail"),
    [
        (
            record(api_version="2025-03-31.basil"),
            API_VERSION,
            "api_version 2025-03-31.basil is not among 2026-08-26",
        ),
        (
            record("refund.created", api_version="2025-03-31.basil"),
            API_VERSION,
            "api_version 2025-03-31.basil is not among 2026-08-26",
        ),
        (record(api_version=None), API_VERSION, "api_version (none) is not among 2026-08-26"),
        (
            record(at=CREATED - timedelta(seconds=1)),
            BEFORE_OPERATION,
            "the event is older than the operation",
        ),
        (
            record("charge.refunded"),
            TYPE_UNREAD,
            "no channel of stripe.refund.succeeded reads charge.refunded",
        ),
        # An unread type on another version is named by its type: no version would count it.
        (
            record("charge.refunded", api_version="2025-03-31.basil"),
            TYPE_UNREAD,
            "no channel of stripe.refund.succeeded reads charge.refunded",
        ),
    ],
)
def test_the_reason_an_event_counts_for_nothing_is_named(
    event: EventRecord, reason: str, detail: str
) -> None:
    found = why_ignored(load(), event=event, operation_created_at=CREATED)
    assert found is not None
    assert (found.reason, found.detail) == (reason, detail)
    assert (found.event_id, found.type) == (event.event_id, event.type)


@pytest.mark.parametrize(
    "event",
    [
        record(),
        record(at=CREATED),  # the same second as the operation counts
        record("refund.created"),
    ],
)
def test_an_event_a_channel_may_read_is_not_ignored(event: EventRecord) -> None:
    assert why_ignored(load(), event=event, operation_created_at=CREATED) is None


def test_the_version_in_the_body_is_read_when_the_column_is_empty() -> None:
    event = record(api_version=None, body={"api_version": "2026-08-26", "data": {}})
    assert why_ignored(load(), event=event, operation_created_at=CREATED) is None


def test_every_event_the_reduction_sets_aside_for_its_version_is_named() -> None:
    """What the engine's reduction counts as ``unsupported`` is what is named here."""
    contract = load()
    channel = next(c for c in contract.channels if c.name == "refund_succeeded_events")
    events = [
        record(api_version=v, event_id=f"evt_{i}")
        for i, v in enumerate(["2025-03-31.basil", "2026-08-26", "2024-06-20", None])
    ]
    context = EvaluationContext(correlation={"refund_id": "re_1"})
    reduced = reduce_events(
        channel,
        events,
        context=context,
        operation_created_at=CREATED,
        api_versions=contract.provider_api_versions,
    )
    named = [
        e
        for e in events
        if why_ignored(contract, event=e, operation_created_at=CREATED) is not None
    ]
    assert reduced["unsupported"] == len(named) == 3
    assert reduced["count"] == 1


def test_the_summary_groups_by_detail_most_first() -> None:
    contract = load()
    found = [
        why_ignored(contract, event=e, operation_created_at=CREATED)
        for e in [
            record(api_version="2025-03-31.basil", event_id="evt_a"),
            record("refund.created", api_version="2025-03-31.basil", event_id="evt_b"),
            record(api_version="2025-03-31.basil", event_id="evt_c"),
            record(at=CREATED - timedelta(seconds=3), event_id="evt_d"),
            record("charge.refunded", event_id="evt_e"),
        ]
    ]
    items = [f for f in found if f is not None]
    assert ignored_summary(items, include_unread=False) == (
        "3 events ignored: api_version 2025-03-31.basil is not among 2026-08-26; "
        "1 event ignored: the event is older than the operation"
    )
    assert ignored_summary(items, include_unread=True) is not None
    assert "charge.refunded" in str(ignored_summary(items, include_unread=True))
    assert ignored_summary([], include_unread=True) is None
    assert ignored_summary(items[-1:], include_unread=False) is None


# ------------------------------------------- several API versions in one contract (allowed)


def test_a_contract_that_lists_two_versions_counts_both_and_names_a_third() -> None:
    contract = variant(provider_api_versions=["2026-08-26", OTHER])
    channel = next(c for c in contract.channels if c.name == "refund_succeeded_events")
    events = [
        record(api_version=v, event_id=f"evt_{i}")
        for i, v in enumerate(["2026-08-26", OTHER, "2024-06-20"])
    ]
    reduced = reduce_events(
        channel,
        events,
        context=EvaluationContext(correlation={"refund_id": "re_1"}),
        operation_created_at=CREATED,
        api_versions=contract.provider_api_versions,
    )
    assert (reduced["count"], reduced["unsupported"]) == (2, 1)
    named = [why_ignored(contract, event=e, operation_created_at=CREATED) for e in events]
    assert [n.detail if n else None for n in named] == [
        None,
        None,
        f"api_version 2024-06-20 is not among 2026-08-26, {OTHER}",
    ]
    assert lint_contract(contract, file="x.yaml") == []


def test_adding_a_version_changes_the_contract_hash() -> None:
    """Listing another version is a change of meaning: a new hash, so a new contract version."""
    base = load()
    assert contract_hash(variant(provider_api_versions=["2026-08-26", OTHER])) != contract_hash(
        base
    )


def test_the_shipped_contracts_count_only_their_own_version() -> None:
    for name in ("refund.succeeded", "refund.created"):
        assert load(name).provider_api_versions == ("2026-08-26",)


def test_lint_refuses_a_version_listed_twice() -> None:
    contract = variant(provider_api_versions=["2026-08-26", "2026-08-26"])
    found = lint_contract(contract, file="x.yaml")
    assert [f.field for f in found] == ["provider_api_versions"]
