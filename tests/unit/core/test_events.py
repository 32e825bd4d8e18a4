"""The webhook reduction: filtering, the operation window, dedup, order, API versions."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest

from shared.core import ChannelError
from shared.core.context import build_context
from shared.core.events import reduce_events
from shared.core.types import EventRecord
from tests.unit.core.builders import T0, event, facts, load, variant

C = load()
SUCCEEDED = C.channel("refund_succeeded_events")
CREATED = C.channel("refund_created_events")
CONTEXT = build_context(C, facts())


def reduce(channel: Any, events: list[EventRecord], **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("api_versions", C.provider_api_versions)
    return reduce_events(channel, events, context=CONTEXT, operation_created_at=T0, **kwargs)


def test_reduction_shape() -> None:
    first = event("evt_a", at=T0 + timedelta(seconds=2))
    second = event("evt_b", at=T0 + timedelta(seconds=9))
    result = reduce(SUCCEEDED, [second, first])
    assert result == {
        "events": [first.body, second.body],
        "count": 2,
        "latest": second.body,
        "earliest": first.body,
        "types": ["refund.updated"],
        "duplicates_dropped": 0,
        "unsupported": 0,
    }


def test_empty_reduction() -> None:
    result = reduce(SUCCEEDED, [])
    assert result["count"] == 0
    assert result["latest"] is None
    assert result["earliest"] is None


@pytest.mark.parametrize(
    ("record", "counted"),
    [
        (event("e"), True),
        (event("e", "refund.created"), False),  # another type
        (event("e", id="re_2"), False),  # another refund
        (event("e", status="pending"), False),  # not the succeeded state
        (event("e", at=T0.replace(microsecond=0)), True),  # same second as the operation
        (event("e", at=T0 - timedelta(microseconds=400_001)), False),  # the second before
    ],
)
def test_filtering(record: EventRecord, counted: bool) -> None:
    assert reduce(SUCCEEDED, [record])["count"] == (1 if counted else 0)


def test_match_rules_that_are_unknown_do_not_count() -> None:
    shapeless = EventRecord("evt_x", "refund.updated", T0 + timedelta(seconds=1), {"data": {}})
    assert reduce(SUCCEEDED, [shapeless], api_versions=())["count"] == 0
    uncorrelated = reduce_events(
        SUCCEEDED,
        [event("evt_y")],
        context=build_context(C, facts(action_result=None)),
        operation_created_at=T0,
    )
    assert uncorrelated["count"] == 0


def test_include_before_operation() -> None:
    document = C.document()
    channels = document["channels"]
    channels[1]["webhook"]["include_before_operation"] = True
    channel = variant(channels=channels).channel("refund_succeeded_events")
    old = event("evt_old", at=T0 - timedelta(days=1))
    assert reduce(channel, [old])["count"] == 1


def test_duplicates_are_dropped_and_counted() -> None:
    record = event("evt_a", duplicates=2)
    other = event("evt_b", at=T0 + timedelta(seconds=6), duplicates=1)
    result = reduce(SUCCEEDED, [record, record, other, record])
    assert result["count"] == 2
    assert result["duplicates_dropped"] == 2 + 2 + 1


def test_order_is_provider_timestamp_then_event_id_whatever_the_arrival() -> None:
    same_second = T0 + timedelta(seconds=3)
    records = [
        event("evt_c", at=same_second),
        event("evt_a", at=same_second),
        event("evt_b", at=T0 + timedelta(seconds=1)),
        event("evt_d", at=T0 + timedelta(seconds=4)),
    ]
    expected = ["evt_b", "evt_a", "evt_c", "evt_d"]
    for arrival in itertools.permutations(records):
        result = reduce(SUCCEEDED, list(arrival))
        assert [body["id"] for body in result["events"]] == expected


def test_unsupported_api_versions_are_set_aside_and_counted() -> None:
    old = event("evt_old", api_version="2020-08-27")
    result = reduce(SUCCEEDED, [old, old, event("evt_new")])
    assert (result["count"], result["unsupported"], result["duplicates_dropped"]) == (1, 1, 0)
    assert reduce(SUCCEEDED, [old], api_versions=())["count"] == 1


def test_api_version_falls_back_to_the_body() -> None:
    record = event("evt_a", api_version=None)
    body_only = EventRecord(
        record.event_id,
        record.type,
        record.provider_timestamp,
        {**record.body, "api_version": "2026-08-26"},
    )
    assert reduce(SUCCEEDED, [body_only])["count"] == 1
    assert reduce(SUCCEEDED, [record])["unsupported"] == 1


def test_refund_created_channel_matches_on_the_charge() -> None:
    records = [
        event("evt_1", "refund.created", id="re_1"),
        event("evt_2", "refund.created", id="re_2"),
        event("evt_3", "refund.created", id="re_3", charge="ch_other"),
    ]
    assert reduce(CREATED, records)["count"] == 2


def test_a_non_webhook_channel_is_refused() -> None:
    with pytest.raises(ChannelError):
        reduce(C.channel("refund_readback"), [])


def test_records_sharing_an_id_resolve_by_content_not_by_order() -> None:
    supported = event("evt_a")
    conflicting = event("evt_a", api_version="2020-08-27")
    first = reduce(SUCCEEDED, [supported, conflicting])
    assert first == reduce(SUCCEEDED, [conflicting, supported])
    assert first["count"] + first["unsupported"] == 1
