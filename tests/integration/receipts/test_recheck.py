"""An event that names a watched VERIFIED operation asks for one more reading (a recheck); the
evaluation of that reading contradicts the verdict, clears the request, or — when the reading
could not be made — tries again on the contract's schedule until the watch ends."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.orm import Session

from shared.core.schedule import recheck_delay
from shared.core.types import Observation, ObservationStatus
from shared.db.models import Observation as ObservationRow
from shared.db.models import Operation
from shared.db.session import session_scope
from shared.lifecycle.contracts import contract_for
from shared.lifecycle.late_evidence import CheckOutcome, needs_recheck, recheck_verified
from shared.lifecycle.scheduling import request_rechecks
from shared.lifecycle.watch import rechecks_for_events
from tests.integration.receipts.conftest import T0, RefundFlow

pytestmark = pytest.mark.integration


def latest(session: Session, op_id: str) -> list[Observation]:
    rows = session.query(ObservationRow).filter(ObservationRow.operation_id == op_id).all()
    newest: dict[str, ObservationRow] = {}
    for row in rows:
        if row.channel not in newest or row.observed_at > newest[row.channel].observed_at:
            newest[row.channel] = row
    return [
        Observation(
            channel=r.channel,
            observed_at=r.observed_at,
            status=ObservationStatus(r.status),
            value=r.value,
            provider_timestamp=r.provider_timestamp,
            digest=r.digest,
        )
        for r in newest.values()
    ]


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, float]]:
    """What a recheck hands to the broker, and when (after commit only)."""
    calls: list[tuple[str, int, float]] = []

    def record(operation_id: str, fence: int, *, countdown_s: float) -> bool:
        calls.append((operation_id, fence, countdown_s))
        return True

    monkeypatch.setattr("shared.lifecycle.messages.observe", record)
    return calls


def _late(flow: RefundFlow, status: str) -> int:
    """A late ``refund.updated`` of the subject: the watch finds the operation by the refund
    id the event carries, and a recheck is scheduled now (a new fence)."""
    later = T0 + timedelta(minutes=5)
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        before = op.fence
        flow.add_event(s, f"evt_late_{status}", "refund.updated", status, later)
        named = rechecks_for_events(
            s, [("ws_a", "stripe", "refund.updated", [flow.refund_id])], now=later
        )
        assert named == {"op_1": {"refund.updated"}}
        assert request_rechecks(s, named, now=later) == [("op_1", before + 1)]
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        assert needs_recheck(op)
        assert op.fence == before + 1
    return before + 1


def test_late_failure_is_rechecked_and_flags_review(flow: RefundFlow) -> None:
    with session_scope(flow.engine) as s:
        flow.verified(s)
    _late(flow, "failed")
    later = T0 + timedelta(minutes=5, seconds=1)
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        flow.fence = op.fence - 1
        flow.observe(s, op, "failed", later)  # what the observer stores for the new fence
        outcome, receipt = recheck_verified(s, op, latest(s, op.id), now=later)
        assert outcome is CheckOutcome.FLAGGED
        assert receipt is not None
        assert receipt.supersedes is not None
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        assert op.state == "HUMAN_REVIEW"
        assert op.next_observation_at is None
        assert not needs_recheck(op)


def test_late_event_that_does_not_contradict_clears_the_request(flow: RefundFlow) -> None:
    with session_scope(flow.engine) as s:
        flow.verified(s)
    _late(flow, "succeeded")
    later = T0 + timedelta(minutes=5, seconds=1)
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        flow.fence = op.fence - 1
        flow.observe(s, op, "succeeded", later)
        assert recheck_verified(s, op, latest(s, op.id), now=later)[0] is (
            CheckOutcome.NOT_APPLICABLE
        )
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        assert op.state == "VERIFIED"
        assert op.next_observation_at is None


def _unavailable(flow: RefundFlow, s: Session, op: Operation, at: Any) -> None:
    """What the observer stores when the provider answers 503 to the recheck's readback."""
    s.add(
        ObservationRow(
            operation_id=op.id,
            workspace_id=op.workspace_id,
            fence=op.fence,
            channel="refund_readback",
            status="unavailable",
            http_status=503,
            error="http_503",
            observed_at=at,
        )
    )
    s.flush()


def test_a_recheck_that_cannot_read_is_tried_again_on_the_schedule_until_it_reads(
    flow: RefundFlow, sent: list[tuple[str, int, float]]
) -> None:
    """The provider answers 503 to two recheck readbacks: each schedules the next try on the
    contract's backoff (never a dropped marker); the third reads the failure and flags it."""
    with session_scope(flow.engine) as s:
        flow.verified(s)
    fence = _late(flow, "failed")
    at = T0 + timedelta(minutes=5, seconds=1)
    for tries in (1, 2):
        with session_scope(flow.engine) as s:
            op = s.get(Operation, "op_1")
            assert op is not None
            assert op.fence == fence
            _unavailable(flow, s, op, at)
            outcome, receipt = recheck_verified(s, op, latest(s, op.id), now=at)
            assert (outcome, receipt) == (CheckOutcome.UNREAD, None)
            timing = contract_for(s, op).timing
        delay = recheck_delay(timing, tries) / 1000.0
        assert sent[-1] == ("op_1", fence + 1, pytest.approx(delay))
        with session_scope(flow.engine) as s:
            op = s.get(Operation, "op_1")
            assert op is not None
            assert needs_recheck(op)
            assert op.rechecks == tries
            assert op.next_observation_at == at + timedelta(seconds=delay)
        fence += 1
        at += timedelta(seconds=delay)
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        flow.fence = op.fence - 1
        flow.observe(s, op, "failed", at)
        assert recheck_verified(s, op, latest(s, op.id), now=at)[0] is CheckOutcome.FLAGGED


def test_a_recheck_that_cannot_read_stops_when_the_watch_ends(
    flow: RefundFlow, sent: list[tuple[str, int, float]]
) -> None:
    with session_scope(flow.engine) as s:
        op = flow.verified(s)
        assert op.watch_until is not None
        end = op.watch_until
    _late(flow, "failed")
    at = end - timedelta(seconds=1)  # the next try would fall after the watch
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        _unavailable(flow, s, op, at)
        assert recheck_verified(s, op, latest(s, op.id), now=at)[0] is not CheckOutcome.UNREAD
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        assert op.state == "VERIFIED"
        assert not needs_recheck(op)
    assert sent == []


def test_open_and_unwatched_operations_are_not_rechecked(
    flow: RefundFlow, sent: list[tuple[str, int, float]]
) -> None:
    with session_scope(flow.engine) as s:
        op = flow.create(s)
        assert request_rechecks(s, [op.id], now=T0) == []
        assert op.next_observation_at is None
        assert recheck_verified(s, op, [], now=T0) == (CheckOutcome.NOT_APPLICABLE, None)
    assert sent == []


def test_the_watch_ends(flow: RefundFlow) -> None:
    """Past ``watch_until`` an event names nothing: the verdict is settled; the sweeper then
    deletes the watch's keys."""
    from shared.lifecycle.watch import end_expired_watches

    with session_scope(flow.engine) as s:
        op = flow.verified(s)
        end = op.watch_until
        assert end is not None
        charge = op.input["charge"]
    with session_scope(flow.engine) as s:
        event = [("ws_a", "stripe", "refund.created", [charge])]
        assert rechecks_for_events(s, event, now=end - timedelta(seconds=1)) == {
            "op_1": {"refund.created"}
        }
        assert rechecks_for_events(s, event, now=end) == {}
        # An event type no channel of the contract reads names nothing either.
        other = [("ws_a", "stripe", "charge.updated", [charge])]
        assert rechecks_for_events(s, other, now=T0) == {}
        assert request_rechecks(s, ["op_1"], now=end) == []
        assert end_expired_watches(s, now=end) > 0
        assert rechecks_for_events(s, event, now=T0) == {}


def test_the_sweeper_resends_a_lost_recheck(flow: RefundFlow, settings: Any) -> None:
    """The recheck message was lost (a broker restart): the sweeper sends it again once it is
    overdue, like any observation; a VERIFIED operation without a recheck is left alone."""
    from services.verdict.sweeper import Sweeper

    with session_scope(flow.engine) as s:
        flow.verified(s)
    other = RefundFlow(flow.engine, operation_id="op_2", refund_id="re_2")
    with session_scope(flow.engine) as s:
        other.verified(s)
    fence = _late(flow, "failed")
    resent: list[tuple[str, int, float]] = []
    later = T0 + timedelta(minutes=5) + timedelta(seconds=settings.sweeper_grace_seconds + 1)
    sweeper = Sweeper(
        engine=flow.engine,
        settings=settings,
        clock=lambda: later,
        send_observe=lambda op_id, f, countdown: resent.append((op_id, f, countdown)),
    )
    report = sweeper.sweep_once()
    assert resent == [("op_1", fence, 0.0)]
    assert report.resent == 1
    assert report.timed_out == 0
