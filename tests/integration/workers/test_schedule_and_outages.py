"""The contract's schedule, provider outages and silence, through real worker processes."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select

from shared.core.retry import retry_guidance
from shared.core.schedule import next_observation_delay
from shared.core.types import OperationState, Verdict
from shared.db.models import Observation, Transition
from shared.db.session import session_scope
from shared.lifecycle.messages import observe as dispatch_observe
from shared.lifecycle.scheduling import wake
from tests.integration.workers.conftest import (
    Cluster,
    FakeProvider,
    create_operations,
    load_operation,
    make_tenant,
    observations_of,
    short_contract,
    wait_for,
)

pytestmark = pytest.mark.integration

TOLERANCE_S = 0.25


def test_observations_follow_the_schedule_then_the_operation_waits_for_its_deadline(
    cluster: Cluster, provider: FakeProvider
) -> None:
    contract = short_contract(
        contract_id="tests.schedule",
        initial_ms=400,
        poll_ms=300,
        factor=2,
        max_ms=1000,
        max_attempts=5,
        timeout_ms=6000,
    )
    tenant = make_tenant(cluster, provider.url, contract, name="schedule")
    provider.refund("re_sched", charge="ch_sched", status="pending")
    [(op_id, reported_at)] = create_operations(cluster, tenant, [("re_sched", "ch_sched", 1000)])

    wait_for(
        lambda: len(observations_of(cluster, op_id)) >= 2 * 5,
        timeout=10,
        what="five observations",
    )
    time.sleep(1.2)  # longer than the last wait: a sixth poll would have happened by now
    rows = [o for o in observations_of(cluster, op_id) if o.channel == "refund_readback"]
    assert [o.fence for o in rows] == [1, 2, 3, 4, 5], "polling stops at max_attempts"
    assert all(o.status == "ok" and o.value["status"] == "pending" for o in rows)
    times = [reported_at] + [o.observed_at for o in rows]
    for n in range(1, 6):
        expected = next_observation_delay(contract.timing, n)
        assert expected is not None
        waited = (times[n] - times[n - 1]).total_seconds()
        assert abs(waited - expected / 1000) <= TOLERANCE_S, (n, waited, expected)

    op = load_operation(cluster, op_id)
    assert not op.final
    assert op.state == OperationState.PENDING.value
    assert op.verdict == Verdict.PENDING.value
    assert op.reason == "still_transitional"
    assert op.attempts == 5
    assert op.next_observation_at is None  # no poll left; open for callbacks

    # A callback wakes it: one more observation at once, outside the poll schedule.
    with session_scope(cluster.engine) as session:
        fence = wake(session, op_id, now=datetime.now(UTC))
    assert fence == 6
    dispatch_observe(op_id, fence, countdown_s=0)
    wait_for(
        lambda: any(o.fence == 6 for o in observations_of(cluster, op_id)),
        timeout=5,
        what="the woken observation",
    )

    # The deadline gives the contract's on-timeout verdict, escalated to a person.
    deadline = reported_at.timestamp() + contract.timing.timeout_ms / 1000
    wait_for(lambda: load_operation(cluster, op_id).final, timeout=deadline - time.time() + 5)
    op = load_operation(cluster, op_id)
    assert op.verdict == Verdict.UNVERIFIABLE.value
    assert op.reason == "evidence_unavailable_before_timeout"
    assert op.state == OperationState.HUMAN_REVIEW.value
    assert op.decided_at is not None
    assert op.decided_at.timestamp() >= deadline
    assert op.decided_at.timestamp() - deadline < 1.5


def test_an_outage_gives_unverifiable_then_the_recovery_verifies_without_anyone_acting(
    cluster: Cluster, provider: FakeProvider
) -> None:
    contract = short_contract(
        contract_id="tests.outage",
        initial_ms=200,
        poll_ms=300,
        max_ms=300,
        max_attempts=40,
        timeout_ms=20000,
    )
    tenant = make_tenant(cluster, provider.url, contract, name="outage")
    provider.refund("re_out", charge="ch_out", mode="unavailable")
    [(op_id, _)] = create_operations(cluster, tenant, [("re_out", "ch_out", 1000)])

    wait_for(
        lambda: load_operation(cluster, op_id).verdict == Verdict.UNVERIFIABLE.value,
        timeout=5,
        what="UNVERIFIABLE during the outage",
    )
    op = load_operation(cluster, op_id)
    assert op.reason == "evidence_unavailable"
    assert not op.final
    assert op.state == OperationState.PENDING.value
    guidance = retry_guidance(Verdict(op.verdict), op.reason, OperationState(op.state))
    assert guidance.action == "never"
    assert guidance.verification == "yes"
    unavailable = [o for o in observations_of(cluster, op_id) if o.channel == "refund_readback"]
    assert unavailable[-1].status == "unavailable"
    assert unavailable[-1].http_status == 503

    provider.set_mode("re_out", "ok")
    wait_for(lambda: load_operation(cluster, op_id).final, timeout=5, what="recovery")
    op = load_operation(cluster, op_id)
    assert op.verdict == Verdict.VERIFIED.value
    assert op.state == OperationState.VERIFIED.value
    assert op.reason == "all_conditions_hold"
    with session_scope(cluster.engine) as session:
        reasons = session.execute(
            select(Transition.verdict, Transition.reason)
            .where(Transition.operation_id == op_id)
            .order_by(Transition.seq)
        ).all()
    assert (Verdict.UNVERIFIABLE.value, "evidence_unavailable") in reasons
    assert reasons[-1] == (Verdict.VERIFIED.value, "all_conditions_hold")


def test_a_silent_provider_ends_unverifiable_before_timeout_in_human_review(
    cluster: Cluster, provider: FakeProvider
) -> None:
    contract = short_contract(
        contract_id="tests.silent",
        initial_ms=200,
        poll_ms=400,
        max_ms=800,
        max_attempts=4,
        timeout_ms=3000,
    )
    tenant = make_tenant(cluster, provider.url, contract, name="silent")
    provider.refund("re_silent", charge="ch_silent", mode="hang")
    [(op_id, _)] = create_operations(cluster, tenant, [("re_silent", "ch_silent", 1000)])

    wait_for(lambda: load_operation(cluster, op_id).final, timeout=10, what="the deadline")
    op = load_operation(cluster, op_id)
    assert op.verdict == Verdict.UNVERIFIABLE.value
    assert op.reason == "evidence_unavailable_before_timeout"
    assert op.state == OperationState.HUMAN_REVIEW.value
    rows = [o for o in observations_of(cluster, op_id) if o.channel == "refund_readback"]
    assert rows
    assert all(o.status == "unavailable" and o.error == "timeout" for o in rows)


def test_the_same_observe_message_delivered_twice_makes_one_observation(
    cluster: Cluster, provider: FakeProvider
) -> None:
    contract = short_contract(
        contract_id="tests.twice",
        initial_ms=300,
        poll_ms=5000,
        max_ms=5000,
        max_attempts=3,
        timeout_ms=20000,
    )
    tenant = make_tenant(cluster, provider.url, contract, name="twice")
    provider.refund("re_twice", charge="ch_twice", status="pending")
    [(op_id, _)] = create_operations(
        cluster, tenant, [("re_twice", "ch_twice", 1000)], dispatch=False
    )
    for _ in range(3):
        dispatch_observe(op_id, 1, countdown_s=0.3)
    wait_for(lambda: load_operation(cluster, op_id).attempts >= 1, timeout=5)
    time.sleep(1.0)
    with session_scope(cluster.engine) as session:
        count = session.scalar(
            select(func.count())
            .select_from(Observation)
            .where(Observation.operation_id == op_id, Observation.channel == "refund_readback")
        )
    assert count == 1
    assert load_operation(cluster, op_id).attempts == 1
    assert len(provider.reads["re_twice"]) <= 3  # at most one read per delivery, one stored


def test_a_dot_segment_refund_id_reads_nothing_and_never_verifies(
    cluster: Cluster, provider: FakeProvider
) -> None:
    """An agent reporting ``result.id`` "." or ".." would make ``/v1/refunds/{id}`` read the
    refund list or ``/v1``: the path is unknown instead, the reading an error, nothing sent."""
    contract = short_contract(contract_id="tests.dots", max_attempts=2, timeout_ms=60000)
    tenant = make_tenant(cluster, provider.url, contract, name="dots")
    refunds = [("..", "ch_dots", 1000), (".", "ch_dots", 1000), ("%2e%2e", "ch_dots", 1000)]
    made = create_operations(cluster, tenant, refunds)
    for op_id, _ in made:
        wait_for(
            lambda op_id=op_id: any(
                o.channel == "refund_readback" for o in observations_of(cluster, op_id)
            ),
            timeout=15,
            what=f"a reading of {op_id}",
        )
    for op_id, _ in made:
        readings = [o for o in observations_of(cluster, op_id) if o.channel == "refund_readback"]
        assert readings
        assert all((o.status, o.error) == ("error", "path_unresolved") for o in readings)
        op = load_operation(cluster, op_id)
        assert op.verdict != Verdict.VERIFIED.value
        assert not op.final
    with provider.lock:
        sent = list(provider.paths)
    assert not [p for p in sent if p.rstrip("/") in ("/v1", "/v1/refunds") or ".." in p], sent


def test_wakes_are_extra_observations_and_the_schedule_keeps_its_slot(
    cluster: Cluster, provider: FakeProvider
) -> None:
    """Three wakes between the first observation and the second slot (3 s later): each reads at
    once, none counts as an observation of the schedule, and the second observation still comes
    3 s after the first — before, each wake advanced the backoff and the next reading waited
    the next, longer interval from the last wake."""
    contract = short_contract(
        contract_id="tests.wake_slot",
        initial_ms=300,
        poll_ms=3000,
        factor=2,
        max_ms=12000,
        max_attempts=5,
        timeout_ms=30000,
    )
    tenant = make_tenant(cluster, provider.url, contract, name="wake_slot")
    provider.refund("re_slot", charge="ch_slot", status="pending")
    [(op_id, _)] = create_operations(cluster, tenant, [("re_slot", "ch_slot", 1000)])

    def readbacks() -> list[Observation]:
        return [o for o in observations_of(cluster, op_id) if o.channel == "refund_readback"]

    wait_for(lambda: len(readbacks()) >= 1, timeout=10, what="the first observation")
    first = readbacks()[0].observed_at
    for woken in range(3):
        time.sleep(0.3)
        with session_scope(cluster.engine) as session:
            fence = wake(session, op_id, now=datetime.now(UTC))
        assert fence is not None
        dispatch_observe(op_id, fence, countdown_s=0)
        wait_for(
            lambda fence=fence: any(o.fence == fence for o in readbacks()),
            timeout=5,
            what=f"woken observation {woken + 1}",
        )
    assert (readbacks()[-1].observed_at - first).total_seconds() < 3.0 - 1.0, "wakes too slow"
    wait_for(lambda: len(readbacks()) >= 5, timeout=10, what="the second slot's observation")
    slot = readbacks()[4]
    waited = (slot.observed_at - first).total_seconds()
    assert abs(waited - 3.0) <= TOLERANCE_S, waited
    op = load_operation(cluster, op_id)
    assert op.attempts == 2  # the first slot and the second; the three wakes were extra
