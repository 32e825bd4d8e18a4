"""Issuing receipts on PostgreSQL: one current receipt per final verdict, none while open,
evidence digests from the stored rows, keys generated, rotated and loaded from a file."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select, text

from shared.core.receipt import document_bytes, signing_payload
from shared.db.models import Event, Operation, Receipt, ReceiptKey
from shared.db.models import Observation as ObservationRow
from shared.db.session import session_scope
from shared.lifecycle.receipt_check import Verification, verify_receipt_document
from shared.lifecycle.receipt_keyring import (
    ReceiptKeyError,
    generate_private_key,
    key_id_for,
    keyring_from_rows,
    keys_document,
    write_private_key_file,
)
from shared.lifecycle.receipt_keys import active_signing_key, list_receipt_keys, rotate_receipt_key
from shared.lifecycle.receipts import (
    ReceiptNotIssuable,
    current_receipt,
    issue_receipt,
    receipt_document_for,
)
from shared.runtime.settings import Settings, get_settings
from shared.trust.registry import get_registry
from tests.integration.receipts.conftest import T0, RefundFlow

pytestmark = pytest.mark.integration


def _verify(engine: Engine, document: dict[str, object]) -> Verification:
    with session_scope(engine) as s:
        ring = keyring_from_rows(list_receipt_keys(s))
    return verify_receipt_document(document_bytes(document), ring).status


def test_final_verdict_has_exactly_one_current_signed_receipt(flow: RefundFlow) -> None:
    with session_scope(flow.engine) as s:
        flow.verified(s)
    with session_scope(flow.engine) as s:
        rows = list(s.execute(select(Receipt)).scalars())
        assert len(rows) == 1
        row = rows[0]
        assert row.current is True
        assert row.supersedes is None
        body = row.body
        op = s.get(Operation, "op_1")
        assert op is not None
        assert op.state == "VERIFIED"
        assert body["operation_id"] == "op_1"
        assert body["workspace_id"] == "ws_a"
        assert body["verdict"] == "VERIFIED"
        assert body["reason"] == "all_conditions_hold"
        assert body["safe_to_claim_complete"] is True
        assert body["contract"] == {
            "id": "stripe.refund.succeeded",
            "version": get_registry().versions("stripe.refund.succeeded")[-1],  # the newest
            "hash": op.contract_hash,
            "completion_level": "succeeded",
        }
        assert body["subject"] == {"type": "stripe.refund", "key": "refund_id", "id": "re_1"}
        assert {"strategy": "resource_id", "assurance": "strong"} in body["correlation"]
        ids = {c["id"] for c in body["conditions"]}
        assert {"refund_status_succeeded", "refund_event_succeeded", "terminal_failure"} <= ids
        # Evidence digests are the stored rows' digests: the readback and each counted event.
        readback = s.execute(
            select(ObservationRow).where(ObservationRow.channel == "refund_readback")
        ).scalar_one()
        events = {e.event_id: e for e in s.execute(select(Event)).scalars()}
        by_channel = {(e["channel"], e["digest"]) for e in body["evidence"]}
        assert ("refund_readback", readback.digest) in by_channel
        assert ("refund_succeeded_events", events["evt_succeeded_op_1"].digest) in by_channel
        assert ("refund_created_events", events["evt_created_op_1"].digest) in by_channel
        assert body["valid_as_of"] == "2026-11-30T08:00:03.250000Z"
        assert body["decided_at"] == "2026-11-30T08:00:03.250000Z"
        document = receipt_document_for(row)
        assert current_receipt(s, "op_1") is not None
    assert _verify(flow.engine, document) is Verification.VALID
    # The stored body is exactly what was signed: re-reading it from the database verifies.
    assert signing_payload(json.loads(document_bytes(document))["receipt"]) == signing_payload(body)


def test_no_receipt_for_an_open_operation(flow: RefundFlow) -> None:
    with session_scope(flow.engine) as s:
        op = flow.create(s)
        at = T0 + timedelta(seconds=3)
        flow.observe(s, op, "pending", at)
        decision = flow.decide(s, op, at)
        assert decision.verdict == "PENDING"
        assert flow.write(s, op, decision, at)
        with pytest.raises(ReceiptNotIssuable, match="open"):
            issue_receipt(s, op, now=at)
    with session_scope(flow.engine) as s:
        assert s.scalar(select(func.count()).select_from(Receipt)) == 0
        # Even with the final flag forced, an open state gives no receipt.
        op = s.get(Operation, "op_1")
        assert op is not None
        op.final = True
        with pytest.raises(ReceiptNotIssuable):
            issue_receipt(s, op, now=T0)
        op.final = False


def test_failed_verdict_receipt(flow: RefundFlow) -> None:
    with session_scope(flow.engine) as s:
        op = flow.create(s)
        at = T0 + timedelta(seconds=3)
        flow.observe(s, op, "failed", at)
        decision = flow.decide(s, op, at)
        assert decision.verdict == "FAILED"
        assert flow.write(s, op, decision, at)
    with session_scope(flow.engine) as s:
        row = current_receipt(s, "op_1")
        assert row is not None
        assert row.body["verdict"] == "FAILED"
        assert row.body["reason"] == "terminal_failure"
        assert row.body["safe_to_claim_complete"] is False
        channels = [e["channel"] for e in row.body["evidence"]]
        assert "refund_readback" in channels


def test_receipt_issue_rolls_back_with_the_state(flow: RefundFlow) -> None:
    """A receipt is written in the state change's transaction: a rollback leaves neither."""

    def verify_then_fail() -> None:
        with session_scope(flow.engine) as s:
            flow.verified(s)
            assert s.scalar(select(func.count()).select_from(Receipt)) == 1
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        verify_then_fail()
    with session_scope(flow.engine) as s:
        assert s.scalar(select(func.count()).select_from(Receipt)) == 0
        assert s.get(Operation, "op_1") is None


def test_key_generated_once_and_stored_encrypted(flow: RefundFlow, settings: Settings) -> None:
    with session_scope(flow.engine) as s:
        first = active_signing_key(s, now=T0, settings=settings)
    with session_scope(flow.engine) as s:
        again = active_signing_key(s, now=T0, settings=settings)
        rows = list_receipt_keys(s)
    assert first.key_id == again.key_id
    assert len(rows) == 1
    assert rows[0].status == "active"
    assert rows[0].private_key_enc is not None
    raw_private = first.private_key.private_bytes_raw()
    assert raw_private not in rows[0].private_key_enc


def test_rotation_keeps_old_receipts_valid(flow: RefundFlow, settings: Settings) -> None:
    with session_scope(flow.engine) as s:
        flow.verified(s)
        old = current_receipt(s, "op_1")
        assert old is not None
        old_document, old_key = receipt_document_for(old), old.key_id
    with session_scope(flow.engine) as s:
        new, retired = rotate_receipt_key(s, now=T0 + timedelta(days=1), settings=settings)
        assert retired is not None
        assert retired.key_id == old_key
    with session_scope(flow.engine) as s:
        rows = {r.key_id: r for r in list_receipt_keys(s)}
        assert rows[old_key].status == "retired"
        assert rows[old_key].retired_at is not None
        assert rows[old_key].private_key_enc is None  # a retired key can never sign again
        assert rows[new.key_id].status == "active"
        document = keys_document(rows.values())
        assert [k["status"] for k in document["keys"]] == ["active", "retired"]
        assert active_signing_key(s, now=T0, settings=settings).key_id == new.key_id
    assert _verify(flow.engine, old_document) is Verification.VALID
    # A second operation is signed with the new key.
    other = RefundFlow(flow.engine, operation_id="op_2", refund_id="re_2")
    with session_scope(flow.engine) as s:
        other.verified(s)
        row = current_receipt(s, "op_2")
        assert row is not None
        assert row.key_id == new.key_id
        document = receipt_document_for(row)
    assert _verify(flow.engine, document) is Verification.VALID


def test_key_from_file(
    flow: RefundFlow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> None:
    with session_scope(flow.engine) as s:
        generated = active_signing_key(s, now=T0, settings=settings).key_id
    private = generate_private_key()
    path = tmp_path / "receipt.pem"
    write_private_key_file(path, private)
    monkeypatch.setenv("PROVELY_RECEIPT_KEY_FILE", str(path))
    get_settings.cache_clear()
    with session_scope(flow.engine) as s:
        flow.verified(s)
        row = current_receipt(s, "op_1")
        assert row is not None
        assert row.key_id == key_id_for(private.public_key())
        stored = s.get(ReceiptKey, row.key_id)
        assert stored is not None
        assert stored.private_key_enc is None  # the private half stays in the file
        replaced = s.get(ReceiptKey, generated)
        assert replaced is not None
        assert replaced.status == "retired"  # a configured file replaces the generated key
        with pytest.raises(ReceiptKeyError, match="KEY_FILE"):
            rotate_receipt_key(s, now=T0, settings=get_settings())
    # Pointing back at a retired key is refused.
    monkeypatch.delenv("PROVELY_RECEIPT_KEY_FILE")
    get_settings.cache_clear()
    with session_scope(flow.engine) as s:
        with pytest.raises(ReceiptKeyError, match="lives in a key file"):
            active_signing_key(s, now=T0, settings=get_settings())
        rotate_receipt_key(s, now=T0 + timedelta(days=1), settings=get_settings())
    monkeypatch.setenv("PROVELY_RECEIPT_KEY_FILE", str(path))
    get_settings.cache_clear()
    with session_scope(flow.engine) as s, pytest.raises(ReceiptKeyError, match="retired"):
        active_signing_key(s, now=T0, settings=get_settings())


def test_one_current_receipt_even_when_issued_twice(flow: RefundFlow) -> None:
    """A second issue for the same final state supersedes the first; one stays current."""
    with session_scope(flow.engine) as s:
        op = flow.verified(s)
        second = issue_receipt(s, op, now=T0 + timedelta(seconds=10))
    with session_scope(flow.engine) as s:
        current = list(s.execute(select(Receipt).where(Receipt.current.is_(True))).scalars())
        assert [r.id for r in current] == [second.id]
        assert s.scalar(select(func.count()).select_from(Receipt)) == 2
        assert second.supersedes is not None


def test_body_is_never_rewritten(flow: RefundFlow) -> None:
    with session_scope(flow.engine) as s:
        flow.verified(s)
    with flow.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE receipts SET body = jsonb_set(body::jsonb, '{verdict}', '\"FAILED\"')::json"
            )
        )
    with session_scope(flow.engine) as s:
        row = current_receipt(s, "op_1")
        assert row is not None
        document = receipt_document_for(row)
    assert _verify(flow.engine, document) is Verification.TAMPERED


def test_the_database_refuses_a_second_current_receipt(flow: RefundFlow) -> None:
    from sqlalchemy.exc import IntegrityError

    with session_scope(flow.engine) as s:
        flow.verified(s)
        row = current_receipt(s, "op_1")
        assert row is not None
        values = {
            "operation_id": row.operation_id,
            "workspace_id": row.workspace_id,
            "body": json.dumps(row.body),
            "signature": row.signature,
            "key_id": row.key_id,
            "created_at": row.created_at,
        }
    forged = text(
        "INSERT INTO receipts (id, operation_id, workspace_id, body, signature, "
        "key_id, current, created_at) VALUES ('rcpt_forged', :operation_id, "
        ":workspace_id, CAST(:body AS json), :signature, :key_id, true, :created_at)"
    )
    with (
        pytest.raises(IntegrityError, match="uq_receipts_operation_one_current"),
        flow.engine.begin() as conn,
    ):
        conn.execute(forged, values)
    with flow.engine.begin() as conn:  # a superseded (not current) row is allowed
        conn.execute(
            text(
                "INSERT INTO receipts (id, operation_id, workspace_id, body, signature, "
                "key_id, current, created_at) VALUES ('rcpt_old', :operation_id, "
                ":workspace_id, CAST(:body AS json), :signature, :key_id, false, :created_at)"
            ),
            values,
        )


def test_racing_writers_leave_one_receipt(flow: RefundFlow) -> None:
    """Two evaluations finalise the same operation at once: the version fence lets one win,
    and only the winner's transaction holds a receipt."""
    import threading

    at = T0 + timedelta(seconds=3)
    with session_scope(flow.engine) as s:
        op = flow.create(s)
        flow.add_event(s, "evt_created", "refund.created", "pending", T0)
        flow.add_event(s, "evt_ok", "refund.updated", "succeeded", T0 + timedelta(seconds=2))
        flow.observe(s, op, "succeeded", at)
    barrier = threading.Barrier(4)
    results: list[bool] = []
    errors: list[BaseException] = []

    def finalise() -> None:
        try:
            with session_scope(flow.engine) as s:
                op = s.get(Operation, "op_1")
                assert op is not None
                decision = flow.decide(s, op, at)
                barrier.wait(timeout=30)
                results.append(flow.write(s, op, decision, at))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=finalise) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert sorted(results) == [False, False, False, True]
    with session_scope(flow.engine) as s:
        rows = list(s.execute(select(Receipt)).scalars())
        assert len(rows) == 1
        assert rows[0].current is True
