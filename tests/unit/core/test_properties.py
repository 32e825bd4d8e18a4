"""Hypothesis properties of the verdict engine over generated observation sets.

- never VERIFIED without a fresh E2 readback whose completion conditions hold and a
  correlated E3 event carrying the succeeded state;
- the verdict is the same for every order and duplication of the same events;
- never FAILED unless the provider reported a failure state.

The oracles below are written independently of the engine, straight from the contract page.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.core.engine import decide
from shared.core.types import (
    Decision,
    EventRecord,
    Observation,
    ObservationStatus,
    OperationFacts,
    Verdict,
)
from tests.unit.core.builders import API_VERSION, INPUT, T0, T0_EPOCH, load, webhook

C = load()
STATUSES = ["succeeded", "pending", "requires_action", "failed", "canceled", "processing"]
READBACK_FRESHNESS = timedelta(milliseconds=10_000)
EVENT_WINDOW = timedelta(milliseconds=C.timing.stale_read_window_ms)


def mostly(good: Any, *bad: Any, weight: int = 9) -> st.SearchStrategy[Any]:
    """``good`` nine times out of ten (``weight``), else one of ``bad``: most cases come close
    to VERIFIED so that the properties meet many VERIFIED and near-VERIFIED decisions."""
    return st.sampled_from([good] * (weight * len(bad)) + list(bad))


refund_ids = mostly("re_1", "re_2")
amounts = mostly(500, 499, "500", True, None)
created_values = st.one_of(
    mostly(T0_EPOCH, T0_EPOCH - 2, T0_EPOCH - 1, T0_EPOCH + 3),
    st.just(T0.isoformat()),
    st.just("not a time"),
)


@st.composite
def refund_values(draw: st.DrawFn) -> dict[str, Any]:
    value = {
        "id": draw(refund_ids),
        "object": "refund",
        "status": draw(mostly("succeeded", *STATUSES[1:], weight=2)),
        "amount": draw(amounts),
        "currency": draw(mostly("usd", "eur")),
        "charge": draw(mostly("ch_1", "ch_2")),
        "created": draw(created_values),
    }
    if draw(st.integers(0, 9)) == 0:
        del value[draw(st.sampled_from(sorted(value)))]
    return value


@st.composite
def readbacks(draw: st.DrawFn, now: datetime) -> Observation:
    status = draw(
        mostly(
            ObservationStatus.OK,
            ObservationStatus.UNAVAILABLE,
            ObservationStatus.ERROR,
            ObservationStatus.NOT_FOUND,
        )
    )
    age = timedelta(
        milliseconds=draw(
            st.one_of(st.integers(0, 10_000), st.integers(9_990, 10_010), st.integers(0, 30_000))
        )
    )
    value = draw(refund_values()) if status is ObservationStatus.OK else None
    return Observation("refund_readback", now - age, status, value)


@st.composite
def events(draw: st.DrawFn) -> EventRecord:
    event_id = f"evt_{draw(st.integers(min_value=0, max_value=6))}"
    type_ = draw(mostly("refund.updated", "refund.created", "charge.refunded"))
    at = T0 + timedelta(seconds=draw(st.integers(min_value=-2, max_value=10)))
    api_version = draw(mostly(API_VERSION, "2020-08-27", None))
    obj = {
        "id": draw(refund_ids),
        "object": "refund",
        "status": draw(mostly("succeeded", *STATUSES[1:])),
        "charge": draw(mostly("ch_1", "ch_2")),
    }
    body = {"id": event_id, "type": type_, "api_version": api_version, "data": {"object": obj}}
    return EventRecord(event_id, type_, at, body, api_version)


@dataclass(frozen=True)
class Case:
    facts: OperationFacts
    readbacks: tuple[Observation, ...]
    events: tuple[EventRecord, ...]
    event_age: timedelta
    events_status: ObservationStatus
    now: datetime


@st.composite
def cases(draw: st.DrawFn) -> Case:
    now = T0 + timedelta(seconds=draw(mostly(30, 1, 3600, 7 * 86_400 - 1, 7 * 86_400 + 5)))
    action_result = draw(mostly({"id": "re_1"}, None, {"id": "re_2"}, {"id": ""}, {"x": 1}))
    learned = draw(mostly({}, {"refund_id": "re_1"}, {"refund_id": "re_2"}))
    facts = OperationFacts(
        id="op_1",
        created_at=T0,
        input=dict(INPUT),
        action_result=action_result,
        action_reported_at=T0,
        learned_keys=learned,
    )
    return Case(
        facts=facts,
        readbacks=tuple(
            draw(
                st.lists(
                    readbacks(now),
                    min_size=draw(mostly(1, 0)),
                    max_size=3,
                    unique_by=lambda o: o.observed_at,
                )
            )
        ),
        events=tuple(draw(st.lists(events(), min_size=1, max_size=6))),
        event_age=timedelta(milliseconds=draw(st.integers(min_value=0, max_value=25_000))),
        events_status=draw(mostly(ObservationStatus.OK, ObservationStatus.ERROR)),
        now=now,
    )


def observations(
    case: Case, events: tuple[EventRecord, ...] | list[EventRecord]
) -> list[Observation]:
    result = list(case.readbacks)
    for channel in ("refund_succeeded_events", "refund_created_events"):
        observed = webhook(
            channel,
            events,
            operation=case.facts,
            now=case.now,
            age_s=case.event_age.total_seconds(),
        )
        if case.events_status is not ObservationStatus.OK:
            observed = Observation(channel, observed.observed_at, case.events_status, None)
        result.append(observed)
    return result


def run(case: Case, events: tuple[EventRecord, ...] | list[EventRecord] | None = None) -> Decision:
    return decide(
        C, case.facts, observations(case, case.events if events is None else events), case.now
    )


def latest_readback(case: Case) -> Observation | None:
    return max(case.readbacks, key=lambda o: o.observed_at, default=None)


def subject(case: Case) -> str | None:
    reported = (case.facts.action_result or {}).get("id") or None
    learned = case.facts.learned_keys.get("refund_id")
    if reported and learned and reported != learned:
        return None
    return reported or learned


def readback_holds(case: Case) -> bool:
    reading = latest_readback(case)
    if reading is None or reading.status is not ObservationStatus.OK:
        return False
    if case.now - reading.observed_at > READBACK_FRESHNESS:
        return False
    value = reading.value
    created = value.get("created")
    if isinstance(created, str):
        try:
            created = int(datetime.fromisoformat(created).astimezone(UTC).timestamp())
        except ValueError:
            return False
    return (
        value.get("status") == "succeeded"
        and type(value.get("amount")) is int
        and value.get("amount") == INPUT["amount"]
        and value.get("currency") == INPUT["currency"]
        and type(created) is int
        and created >= T0_EPOCH
    )


def correlated_succeeded_event(case: Case) -> bool:
    if case.events_status is not ObservationStatus.OK or case.event_age > EVENT_WINDOW:
        return False
    refund_id = subject(case)
    return any(
        e.type == "refund.updated"
        and e.api_version == API_VERSION
        and int(e.provider_timestamp.timestamp()) >= T0_EPOCH
        and e.body["data"]["object"]["id"] == refund_id
        and e.body["data"]["object"]["status"] == "succeeded"
        for e in case.events
    )


@settings(max_examples=300, deadline=None)
@given(cases())
def test_never_verified_without_a_fresh_readback_and_a_correlated_event(case: Case) -> None:
    decision = run(case)
    if decision.verdict is Verdict.VERIFIED:
        assert subject(case) is not None
        assert readback_holds(case)
        assert correlated_succeeded_event(case)
        assert decision.final
        assert not decision.escalate


@settings(max_examples=200, deadline=None)
@given(cases(), st.randoms(use_true_random=False), st.lists(st.integers(0, 20), max_size=6))
def test_the_verdict_ignores_the_order_and_duplication_of_events(
    case: Case, rng: Any, duplicate: list[int]
) -> None:
    baseline = run(case)
    shuffled = list(case.events)
    if shuffled:
        shuffled.extend(shuffled[i % len(shuffled)] for i in duplicate)
    rng.shuffle(shuffled)
    again = run(case, shuffled)
    assert (again.verdict, again.reason, again.final, again.class_) == (
        baseline.verdict,
        baseline.reason,
        baseline.final,
        baseline.class_,
    )
    assert [c.holds for c in again.conditions] == [c.holds for c in baseline.conditions]


@settings(max_examples=300, deadline=None)
@given(cases())
def test_never_failed_unless_the_provider_reported_a_failure(case: Case) -> None:
    decision = run(case)
    if decision.verdict is Verdict.FAILED:
        reading = latest_readback(case)
        assert reading is not None
        assert reading.status is ObservationStatus.OK
        assert case.now - reading.observed_at <= READBACK_FRESHNESS
        assert reading.value["status"] == "failed"
        assert subject(case) is not None


@settings(max_examples=200, deadline=None)
@given(cases())
def test_every_decision_is_consistent(case: Case) -> None:
    decision = run(case)
    assert decision == run(case)  # pure: same inputs, same answer
    if decision.verdict in {Verdict.PENDING} or decision.reason == "evidence_unavailable":
        assert not decision.final
    if decision.final and decision.verdict is Verdict.CONTRADICTED:
        assert decision.reason in {n.id for n in C.negative} | {"canceled"}
    assert len(decision.conditions) == len(C.completion) + len(C.negative) + len(C.verdict_map)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(events(), max_size=8),
    st.randoms(use_true_random=False),
    st.lists(st.integers(0, 20), max_size=6),
)
def test_the_reduction_ignores_arrival_order_and_repeats(
    records: list[EventRecord], rng: Any, duplicate: list[int]
) -> None:
    operation = OperationFacts(
        id="op_1", created_at=T0, input=dict(INPUT), action_result={"id": "re_1"}
    )
    for channel in ("refund_succeeded_events", "refund_created_events"):
        baseline = webhook(channel, records, operation=operation).value
        arrived = list(records)
        if arrived:
            arrived.extend(arrived[i % len(arrived)] for i in duplicate)
        rng.shuffle(arrived)
        again = webhook(channel, arrived, operation=operation).value
        assert {k: v for k, v in again.items() if k != "duplicates_dropped"} == {
            k: v for k, v in baseline.items() if k != "duplicates_dropped"
        }
        ids = [e["id"] for e in again["events"]]
        assert len(ids) == len(set(ids))
