"""Late contradicting evidence on PostgreSQL: a VERIFIED refund that later reads `failed`."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from shared.core.receipt import document_bytes
from shared.db.models import Operation, Receipt, Transition
from shared.db.session import session_scope
from shared.lifecycle.late_evidence import LATE_CONTRADICTION, CheckOutcome, check_late_evidence
from shared.lifecycle.receipt_check import Verification, verify_receipt_document
from shared.lifecycle.receipt_keyring import keyring_from_rows
from shared.lifecycle.receipt_keys import list_receipt_keys
from shared.lifecycle.receipts import current_receipt, receipt_document_for
from tests.integration.receipts.conftest import T0, RefundFlow

pytestmark = pytest.mark.integration


def test_succeeded_then_failed_supersedes_the_verified_receipt(flow: RefundFlow) -> None:
    with session_scope(flow.engine) as s:
        flow.verified(s)
        first = current_receipt(s, "op_1")
        assert first is not None
        first_id = first.id
    later = T0 + timedelta(minutes=5)
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        flow.add_event(s, "evt_failed", "refund.updated", "failed", later - timedelta(seconds=1))
        flow.observe(s, op, "failed", later)
        decision = flow.decide(s, op, later)
        assert (decision.verdict, decision.reason) == ("FAILED", "terminal_failure")
        outcome, receipt = check_late_evidence(s, op, decision, now=later)
        assert outcome is CheckOutcome.FLAGGED
        assert receipt is not None
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        assert op.state == "HUMAN_REVIEW"
        assert (op.verdict, op.reason) == ("CONTRADICTED", LATE_CONTRADICTION)
        assert op.final is True
        rows = {r.id: r for r in s.execute(select(Receipt)).scalars()}
        assert len(rows) == 2
        old, new = rows[first_id], rows[receipt.id]
        assert old.current is False
        assert new.current is True
        assert new.supersedes == first_id
        assert new.body["supersedes"] == first_id
        assert new.body["verdict"] == "CONTRADICTED"
        assert new.body["reason"] == LATE_CONTRADICTION
        assert new.body["safe_to_claim_complete"] is False
        assert new.body["valid_as_of"] == "2026-11-30T08:05:00.250000Z"
        failing = [c for c in new.body["conditions"] if c["id"] == "terminal_failure"]
        assert failing[0]["holds"] is True
        # The first receipt is untouched: still VERIFIED, still valid for its valid_as_of.
        assert old.body["verdict"] == "VERIFIED"
        assert old.body["valid_as_of"] == "2026-11-30T08:00:03.250000Z"
        last = s.execute(select(Transition).order_by(Transition.seq.desc()).limit(1)).scalar_one()
        assert (last.from_state, last.to_state, last.cause) == (
            "VERIFIED",
            "HUMAN_REVIEW",
            LATE_CONTRADICTION,
        )
        assert last.details is not None
        assert last.details["evidence_reason"] == "terminal_failure"
        assert last.details["supersedes"] == first_id
        ring = keyring_from_rows(list_receipt_keys(s))
        documents = [receipt_document_for(old), receipt_document_for(new)]
    for document in documents:
        result = verify_receipt_document(document_bytes(document), ring)
        assert result.status is Verification.VALID, result.reason
    # A second contradicting decision changes nothing more: the operation is under review.
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        decision = flow.decide(s, op, later)
        assert check_late_evidence(s, op, decision, now=later) == (
            CheckOutcome.NOT_APPLICABLE,
            None,
        )


def test_still_succeeded_changes_nothing(flow: RefundFlow) -> None:
    with session_scope(flow.engine) as s:
        flow.verified(s)
    later = T0 + timedelta(minutes=5)
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        flow.observe(s, op, "succeeded", later)
        decision = flow.decide(s, op, later)
        assert decision.verdict == "VERIFIED"
        assert check_late_evidence(s, op, decision, now=later)[0] is CheckOutcome.NOT_APPLICABLE
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        assert op.state == "VERIFIED"
        assert len(list(s.execute(select(Receipt)).scalars())) == 1


def test_older_contradicting_evidence_is_not_a_contradiction(flow: RefundFlow) -> None:
    """A reading older than the verifying one (by provider time, then observation time) is
    an earlier state delivered late: arrival order decides nothing (safety rule 5)."""
    with session_scope(flow.engine) as s:
        flow.verified(s)
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        earlier = T0 + timedelta(seconds=2)  # before the verifying reading at T0 + 3 s
        flow.observe(s, op, "failed", earlier)
        decision = flow.decide(s, op, earlier)
        assert decision.verdict == "FAILED"
        outcome, receipt = check_late_evidence(s, op, decision, now=T0 + timedelta(minutes=1))
        assert outcome is CheckOutcome.OLDER_EVIDENCE
        assert receipt is None
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        assert op.state == "VERIFIED"


def test_only_verified_operations_are_contradicted_late(flow: RefundFlow) -> None:
    with session_scope(flow.engine) as s:
        op = flow.create(s)
        at = T0 + timedelta(seconds=3)
        flow.observe(s, op, "failed", at)
        decision = flow.decide(s, op, at)
        assert flow.write(s, op, decision, at)
        assert op.state == "FAILED"
        assert check_late_evidence(s, op, decision, now=at)[0] is CheckOutcome.NOT_APPLICABLE
