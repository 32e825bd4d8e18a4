"""A late event linked to a VERIFIED operation asks for one more reading (a recheck); the
evaluation of that reading contradicts the verdict or clears the request."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.orm import Session

from shared.core.types import Observation, ObservationStatus
from shared.db.models import Observation as ObservationRow
from shared.db.models import Operation
from shared.db.session import session_scope
from shared.receipts import (
    CheckOutcome,
    needs_recheck,
    recheck_verified,
    request_recheck,
)
from tests.integration.receipts.conftest import T0, RefundFlow

pytestmark = pytest.mark.integration


def latest(session: Session, op_id: str) -> list[Observation]:
    rows = session.query(ObservationRow).filter(ObservationRow.operation_id == op_id).all()
    newest: dict[str, ObservationRow] = {}
    for row in rows:
        if row.channel not in newest or row.fence > newest[row.channel].fence:
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
    """What the recheck hands to the broker, and when (after commit only)."""
    calls: list[tuple[str, int, float]] = []

    def record(operation_id: str, fence: int, *, countdown_s: float) -> bool:
        calls.append((operation_id, fence, countdown_s))
        return True

    monkeypatch.setattr("shared.scheduling.dispatch_observe", record)
    return calls


def _late(flow: RefundFlow, status: str, sent: list[Any]) -> int:
    later = T0 + timedelta(minutes=5)
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        before = op.fence
        event = flow.add_event(s, f"evt_late_{status}", "refund.updated", status, later)
        request_recheck(s, op, event, later)
        assert needs_recheck(op)
        assert op.fence == before + 1
        assert sent == []  # nothing leaves before the intake commits
    assert sent == [("op_1", before + 1, 0)]
    return before + 1


def test_late_failure_is_rechecked_and_flags_review(
    flow: RefundFlow, sent: list[tuple[str, int, float]]
) -> None:
    with session_scope(flow.engine) as s:
        flow.verified(s)
    _late(flow, "failed", sent)
    later = T0 + timedelta(minutes=5, seconds=1)
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
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


def test_late_event_that_does_not_contradict_clears_the_request(
    flow: RefundFlow, sent: list[tuple[str, int, float]]
) -> None:
    with session_scope(flow.engine) as s:
        flow.verified(s)
    _late(flow, "succeeded", sent)
    later = T0 + timedelta(minutes=5, seconds=1)
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        flow.observe(s, op, "succeeded", later)
        assert recheck_verified(s, op, latest(s, op.id), now=later)[0] is (
            CheckOutcome.NOT_APPLICABLE
        )
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        assert op.state == "VERIFIED"
        assert op.next_observation_at is None


def test_open_or_reviewed_operations_are_not_rechecked(
    flow: RefundFlow, sent: list[tuple[str, int, float]]
) -> None:
    with session_scope(flow.engine) as s:
        op = flow.create(s)
        request_recheck(s, op, None, T0)
        assert op.next_observation_at is None
        assert recheck_verified(s, op, [], now=T0) == (CheckOutcome.NOT_APPLICABLE, None)
    assert sent == []


def test_the_sweeper_resends_a_lost_recheck(
    flow: RefundFlow, sent: list[tuple[str, int, float]], settings: Any
) -> None:
    """The recheck message was lost (a broker restart): the sweeper sends it again once it is
    overdue, like any observation; a VERIFIED operation without a recheck is left alone."""
    from services.verdict.sweeper import Sweeper

    with session_scope(flow.engine) as s:
        flow.verified(s)
    other = RefundFlow(flow.engine, operation_id="op_2", refund_id="re_2")
    with session_scope(flow.engine) as s:
        other.verified(s)
    fence = _late(flow, "failed", sent)
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
