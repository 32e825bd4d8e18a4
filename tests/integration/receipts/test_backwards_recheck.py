"""A recheck of a VERIFIED operation (stripe.refund.succeeded 1.2.0, #30) whose readbacks went
backwards: World B on real rows. The refund failed after the verdict; its ``refund.updated``
(failed) and ``refund.failed`` are stored; the recheck's readback answers 404 for the refund it
read before and the listing of the charge lost it — a lagging read. The readings are stored
``inconsistent`` (``shared.evidence.backwards``), decide nothing, and the failure events
supersede the VERIFIED on their own. Without failure events a backwards recheck is tried again
on the contract's schedule, and a watch that ends on it goes to a person."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.orm import Session

from shared.core.context import build_context
from shared.core.types import EventRecord, ObservationStatus
from shared.db.models import Event, Operation
from shared.db.models import Observation as ObservationRow
from shared.db.session import session_scope
from shared.evidence.backwards import mark_backwards
from shared.evidence.readings import Reading
from shared.evidence.webhooks import reduce_events
from shared.lifecycle.contracts import contract_for
from shared.lifecycle.late_evidence import CheckOutcome, needs_recheck, recheck_verified
from shared.lifecycle.operations import facts_for
from shared.lifecycle.scheduling import request_rechecks
from shared.lifecycle.watch import rechecks_for_events
from tests.integration.receipts.conftest import T0, RefundFlow, sha
from tests.integration.receipts.test_recheck import latest

pytestmark = pytest.mark.integration


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, float]]:
    calls: list[tuple[str, int, float]] = []

    def record(operation_id: str, fence: int, *, countdown_s: float) -> bool:
        calls.append((operation_id, fence, countdown_s))
        return True

    monkeypatch.setattr("shared.lifecycle.messages.observe", record)
    return calls


def _lagging_recheck(flow: RefundFlow, s: Session, op: Operation, at: datetime) -> list[str]:
    """What the observer stores for a recheck served by a lagging read: the refund not found,
    a listing without it, and the webhook channels' reductions; the statuses stored."""
    contract = contract_for(s, op)
    context = build_context(contract, facts_for(op))
    empty = {"object": "list", "data": [], "has_more": False, "count": 0}
    readings = [
        Reading("refund_readback", ObservationStatus.NOT_FOUND, at, http_status=404),
        Reading(
            "charge_refunds",
            ObservationStatus.OK,
            at,
            value=empty,
            raw=json.dumps(empty).encode(),
            digest=sha(json.dumps(empty).encode()),
            http_status=200,
        ),
    ]
    events = [
        EventRecord(e.event_id, e.type, e.provider_timestamp, e.body, e.api_version, e.received_at)
        for e in s.query(Event).filter(Event.workspace_id == op.workspace_id)
    ]
    for channel in contract.channels:
        if channel.verifier == "webhook":
            value = reduce_events(
                channel,
                events,
                context=context,
                operation_created_at=op.created_at,
                api_versions=contract.provider_api_versions,
            )
            raw = json.dumps(value, sort_keys=True).encode()
            latest_event = value.get("latest")
            readings.append(
                Reading(
                    channel.name,
                    ObservationStatus.OK,
                    at,
                    value=value,
                    raw=raw,
                    digest=sha(raw),
                    provider_timestamp=(
                        datetime.fromtimestamp(latest_event["created"], tz=at.tzinfo)
                        if latest_event
                        else None
                    ),
                )
            )
    marked = mark_backwards(s, operation_id=op.id, contract=contract, readings=readings)
    for r in marked:
        s.add(
            ObservationRow(
                operation_id=op.id,
                workspace_id=op.workspace_id,
                fence=op.fence,
                channel=r.channel,
                status=r.status.value,
                value=r.value,
                raw=r.raw,
                digest=r.digest,
                http_status=r.http_status,
                error=r.error,
                provider_timestamp=r.provider_timestamp,
                observed_at=r.observed_at,
            )
        )
    s.flush()
    return sorted(f"{r.channel}:{r.status.value}:{r.error}" for r in marked if r.channel in (
        "refund_readback", "charge_refunds"))  # fmt: skip


def _recheck_for(flow: RefundFlow, at: datetime, *event_types: str) -> None:
    with session_scope(flow.engine) as s:
        named = rechecks_for_events(
            s, [("ws_a", "stripe", t, [flow.refund_id]) for t in event_types], now=at
        )
        assert set(named) == {"op_1"}
        request_rechecks(s, named, now=at)


def test_world_b_failure_events_supersede_while_the_readbacks_go_backwards(
    flow: RefundFlow, sent: list[tuple[str, int, float]]
) -> None:
    with session_scope(flow.engine) as s:
        op = flow.verified(s)
        # 1.2.0 brought the failure events; every newer version keeps them
        assert tuple(map(int, op.contract_version.split("."))) >= (1, 2, 0)
    failed_at = T0 + timedelta(seconds=5)
    with session_scope(flow.engine) as s:
        flow.add_event(s, "evt_updated_failed", "refund.updated", "failed", failed_at)
        flow.add_event(s, "evt_failed", "refund.failed", "failed", failed_at)
    _recheck_for(flow, failed_at, "refund.updated", "refund.failed")
    at = failed_at + timedelta(milliseconds=400)
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        assert needs_recheck(op)
        stored = _lagging_recheck(flow, s, op, at)
        assert stored == [
            "charge_refunds:inconsistent:listed_item_lost",
            "refund_readback:inconsistent:not_found_after_found",
        ]
        outcome, receipt = recheck_verified(s, op, latest(s, op.id), now=at)
        assert outcome is CheckOutcome.FLAGGED
        assert receipt is not None
        assert receipt.supersedes is not None
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        assert (op.state, op.reason) == ("HUMAN_REVIEW", "late_contradiction")
        assert not needs_recheck(op)


def _backwards_only(flow: RefundFlow) -> datetime:
    """A VERIFIED operation; a refund.updated that changes nothing asks for a recheck."""
    with session_scope(flow.engine) as s:
        flow.verified(s)
    at = T0 + timedelta(seconds=6)
    with session_scope(flow.engine) as s:
        flow.add_event(s, "evt_metadata", "refund.updated", "succeeded", at)
    _recheck_for(flow, at, "refund.updated")
    return at


def test_a_recheck_that_went_backwards_is_tried_again_not_settled(
    flow: RefundFlow, sent: list[tuple[str, int, float]]
) -> None:
    at = _backwards_only(flow) + timedelta(milliseconds=300)
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        fence = op.fence
        _lagging_recheck(flow, s, op, at)
        assert recheck_verified(s, op, latest(s, op.id), now=at) == (CheckOutcome.UNREAD, None)
    assert [(op_id, f) for op_id, f, _ in sent] == [("op_1", fence + 1)]
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        assert op.state == "VERIFIED"
        assert needs_recheck(op)  # not settled: the next reading is scheduled
        assert op.rechecks == 1


def test_a_watch_that_ends_on_a_backwards_reading_goes_to_a_person(
    flow: RefundFlow, sent: list[tuple[str, int, float]]
) -> None:
    _backwards_only(flow)
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        assert op.watch_until is not None
        at = op.watch_until - timedelta(seconds=1)  # the next try would fall after the watch
        _lagging_recheck(flow, s, op, at)
        outcome, receipt = recheck_verified(s, op, latest(s, op.id), now=at)
        assert outcome is CheckOutcome.INCONSISTENT
        assert receipt is not None
        assert receipt.supersedes is not None
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        assert (op.state, op.verdict, op.reason) == (
            "HUMAN_REVIEW",
            "UNVERIFIABLE",
            "inconsistent_reading",
        )
        assert not needs_recheck(op)
    assert sent == []


def test_a_consistent_reading_is_stored_as_read(flow: RefundFlow) -> None:
    with session_scope(flow.engine) as s:
        op = flow.verified(s)
        contract = contract_for(s, op)
        listing: dict[str, Any] = {"object": "list", "data": [flow.refund("failed")], "count": 1}
        readings = [
            Reading("refund_readback", ObservationStatus.OK, T0, value=flow.refund("failed")),
            Reading("charge_refunds", ObservationStatus.OK, T0, value=listing),
        ]
        assert mark_backwards(s, operation_id=op.id, contract=contract, readings=readings) == (
            readings
        )
        back = [Reading("refund_readback", ObservationStatus.OK, T0, value=flow.refund("pending"))]
        marked = mark_backwards(s, operation_id=op.id, contract=contract, readings=back)
        assert [(r.status, r.error) for r in marked] == [
            (ObservationStatus.INCONSISTENT, "stage_went_back")
        ]
