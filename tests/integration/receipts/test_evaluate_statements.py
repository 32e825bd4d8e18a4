"""What a final evaluate sends to PostgreSQL: every statement of one evaluate that decides
VERIFIED, counted on the driver (the statements SQLAlchemy sends, those sent on the driver's own
cursor and the audit chain's pipeline alike), and what it wrote: the fenced state, the receipt
and the watch. A receipt is signed with the key the process signed with last only while that key
is active: a key another process retired never signs again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from sqlalchemy import Engine, event, select, text, update
from sqlalchemy.orm import Session

from services.verdict.evaluate import _LATEST_ROWS, Plan, _latest_rows, evaluate_operation
from shared.db.models import Observation as ObservationRow
from shared.db.models import Operation, Receipt, ReceiptKey, Transition, WatchKey, Workspace
from shared.lifecycle.contracts import find_contract
from shared.lifecycle.receipt_check import Verification, verify_receipt_document
from shared.lifecycle.receipt_keyring import ACTIVE, RETIRED, key_id_for, keyring_from_rows
from shared.lifecycle.receipts import receipt_document_for
from shared.runtime.settings import Settings, get_settings
from tests.integration.receipts.conftest import T0, RefundFlow

pytestmark = pytest.mark.integration

FINAL_EVALUATE = [
    "SELECT operations",  # the operation
    "SELECT observations",  # the latest readings
    "SELECT count(pg_advisory_xact_lock",  # the evidence locks
    "SELECT events",  # the events the webhook channels reduce
    "UPDATE operations",  # the fenced final state
    "INSERT INTO receipts",  # signed with this process's key, checked active by the INSERT
    "INSERT INTO watch_keys",  # every key of the watch in one statement, with the COMMIT
    "WITH head AS ( UPDATE workspaces",  # the audit chain, pipelined with the COMMIT
]
WITH_THE_COMMIT = FINAL_EVALUATE[-2:]
"""The statements sent in the pipeline of the COMMIT: one round trip for the three."""


@dataclass
class _Sent:
    statements: list[str] = field(default_factory=list)
    pipelined: list[str] = field(default_factory=list)


@contextmanager
def _statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Sent]:
    """Every statement the driver executes (an executemany counts one per parameter set), and
    those of them sent in a pipeline."""
    sent = _Sent()
    execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

    def record(cursor: Any, query: Any, times: int) -> None:
        statement = " ".join(str(query).split())
        sent.statements.extend([statement] * times)
        if cursor.connection._pipeline is not None:
            sent.pipelined.extend([statement] * times)

    def one(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        record(self, query, 1)
        return execute(self, query, *args, **kwargs)

    def many(self: Any, query: Any, params_seq: Any, *args: Any, **kwargs: Any) -> Any:
        params = list(params_seq)
        record(self, query, len(params))
        return executemany(self, query, params, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(psycopg.Cursor, "execute", one)
        patched.setattr(psycopg.Cursor, "executemany", many)
        yield sent


def _observed(flow: RefundFlow, at: datetime) -> None:
    """A stripe.refund.created 1.0.0 operation (as the pipeline bench creates them) whose
    refund was read back at ``at``, with no event: the evaluate decides VERIFIED."""
    with Session(flow.engine) as session, session.begin():
        if session.get(Workspace, flow.workspace_id) is None:
            session.add(Workspace(id=flow.workspace_id, name="w", created_at=T0))
            session.flush()
        resolved = find_contract(session, flow.workspace_id, "stripe.refund.created", "1.0.0")
        op = Operation(
            id=flow.operation_id,
            workspace_id=flow.workspace_id,
            contract_id=resolved.contract.id,
            contract_version=resolved.contract.version,
            contract_hash=resolved.hash,
            completion_level=resolved.contract.completion_level,
            state="OBSERVING",
            verdict="PENDING",
            reason="awaiting_evidence",
            input={"charge": flow.charge, "amount": 500, "currency": "usd"},
            action_phase="accepted",
            action_result={"id": flow.refund_id, "object": "refund"},
            action_reported_at=T0,
            subject_id=flow.refund_id,
            learned_keys={},
            created_at=T0,
            updated_at=T0,
        )
        session.add(op)
        session.flush()
        flow.observe(session, op, "succeeded", at)
        op.fence = flow.fence  # the fence it observed
        op.attempts = 1


def test_a_final_evaluate_sends_eight_statements_the_last_two_with_the_commit(
    pg_engine: Engine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = T0 + timedelta(seconds=3)
    warm = RefundFlow(engine=pg_engine, operation_id="op_0", refund_id="re_0")
    flow = RefundFlow(engine=pg_engine, operation_id="op_1", refund_id="re_1")
    _observed(warm, at)
    _observed(flow, at)
    # The first receipt of the record creates the signing key; the worker has it afterwards.
    first = evaluate_operation(
        pg_engine, warm.operation_id, settings=settings, clock=lambda: at, send=lambda *_: None
    )
    assert first is not None
    assert first.verdict == "VERIFIED", first

    plans: list[Plan] = []
    with _statements(monkeypatch) as sent:
        decided = evaluate_operation(
            flow.engine,
            flow.operation_id,
            settings=settings,
            clock=lambda: at,
            send=lambda _op, plan: plans.append(plan),
        )

    assert decided is not None
    assert decided.verdict == "VERIFIED", decided
    assert plans == [Plan()]
    assert len(sent.statements) == len(FINAL_EVALUATE), "\n".join(sent.statements)
    for statement, expected in zip(sent.statements, FINAL_EVALUATE, strict=True):
        assert expected in statement, (expected, statement)
    assert len(sent.pipelined) == len(WITH_THE_COMMIT), "\n".join(sent.pipelined)
    for statement, expected in zip(sent.pipelined, WITH_THE_COMMIT, strict=True):
        assert expected in statement, (expected, statement)

    with Session(flow.engine) as session:
        op = session.get(Operation, flow.operation_id)
        assert op is not None
        assert (op.state, op.final, op.version) == ("VERIFIED", True, 2)
        receipts = session.scalars(select(Receipt).where(Receipt.operation_id == op.id)).all()
        assert [(r.current, r.supersedes) for r in receipts] == [(True, None)]
        assert receipts[0].body["verdict"] == "VERIFIED"
        watch = session.scalars(select(WatchKey).where(WatchKey.operation_id == op.id)).all()
        assert {w.value for w in watch} >= {flow.refund_id, flow.charge}
        assert {w.until for w in watch} == {op.watch_until}
        chain = session.scalars(
            select(Transition.to_state)
            .where(Transition.operation_id == op.id)
            .order_by(Transition.seq)
        ).all()
        assert chain == ["VERIFIED"]


def test_the_latest_readings_are_read_on_the_driver_as_the_columns_read_them(
    pg_engine: Engine,
) -> None:
    """The decision's latest readings are read on the driver's cursor (no statement goes
    through SQLAlchemy), with the values the mapped columns give: times in UTC whatever the
    connection's time zone, JSON values decoded."""
    at = T0 + timedelta(seconds=3)
    flow = RefundFlow(engine=pg_engine, operation_id="op_1", refund_id="re_1")
    _observed(flow, at)
    with Session(pg_engine) as session, session.begin():
        session.execute(
            update(ObservationRow)
            .where(ObservationRow.channel == "refund_readback")
            .values(provider_timestamp=T0)
        )
        session.execute(text("SET LOCAL TimeZone = 'America/New_York'"))
        expected = session.execute(_LATEST_ROWS, {"operation_id": flow.operation_id}).all()
        through_sqlalchemy: list[str] = []

        def seen(*args: Any) -> None:
            through_sqlalchemy.append(str(args[2]))

        event.listen(pg_engine, "before_cursor_execute", seen)
        try:
            latest = _latest_rows(session, flow.operation_id)
        finally:
            event.remove(pg_engine, "before_cursor_execute", seen)

    assert through_sqlalchemy == []
    assert len(latest) >= 2
    assert [tuple(row) for row in latest] == [tuple(row) for row in expected]
    assert any(row.provider_timestamp is not None for row in latest)
    assert all(row.observed_at.tzinfo is UTC for row in latest)
    assert all(row.provider_timestamp in (None, T0) for row in latest)
    assert all(
        row.provider_timestamp is None or row.provider_timestamp.tzinfo is UTC for row in latest
    )
    assert any(isinstance(row.value, dict) for row in latest)


def test_a_key_retired_by_another_process_signs_no_more_receipts(
    pg_engine: Engine, settings: Settings
) -> None:
    at = T0 + timedelta(seconds=3)
    flows = [
        RefundFlow(engine=pg_engine, operation_id=f"op_{n}", refund_id=f"re_{n}") for n in range(2)
    ]
    for flow in flows:
        _observed(flow, at)
    evaluate_operation(pg_engine, "op_0", settings=settings, clock=lambda: at, send=lambda *_: None)
    with Session(pg_engine) as session, session.begin():
        old = session.scalars(select(Receipt.key_id).where(Receipt.operation_id == "op_0")).one()
        # What a rotation in another process does to the row; this process is not told.
        session.execute(
            update(ReceiptKey)
            .where(ReceiptKey.key_id == old)
            .values(status=RETIRED, retired_at=at, private_key_enc=None)
        )

    decided = evaluate_operation(
        pg_engine, "op_1", settings=settings, clock=lambda: at, send=lambda *_: None
    )

    assert decided is not None
    assert decided.verdict == "VERIFIED", decided
    with Session(pg_engine) as session:
        receipt = session.scalars(select(Receipt).where(Receipt.operation_id == "op_1")).one()
        active = session.scalars(select(ReceiptKey).where(ReceiptKey.status == ACTIVE)).one()
        assert receipt.key_id == active.key_id != old
        keyring = keyring_from_rows(session.scalars(select(ReceiptKey)).all())
    checked = verify_receipt_document(json.dumps(receipt_document_for(receipt)), keyring)
    assert checked.status is Verification.VALID, checked


def test_a_replaced_key_file_signs_the_next_receipt(
    pg_engine: Engine, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``PROVELY_RECEIPT_KEY_FILE`` the file is read for each receipt: the key signed with
    last is not reused, so a file replaced in place signs the next receipt (a rotation)."""
    at = T0 + timedelta(seconds=3)
    path = tmp_path / "receipt-key.pem"
    monkeypatch.setenv("PROVELY_RECEIPT_KEY_FILE", str(path))
    get_settings.cache_clear()  # the steps sign with the process's settings
    by_file = get_settings()
    assert by_file.receipt_key_file == path
    key_ids = []
    for n in range(2):
        private = Ed25519PrivateKey.generate()
        path.write_bytes(private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
        key_ids.append(key_id_for(private.public_key()))
        flow = RefundFlow(engine=pg_engine, operation_id=f"op_{n}", refund_id=f"re_{n}")
        _observed(flow, at)
        decided = evaluate_operation(
            pg_engine, flow.operation_id, settings=by_file, clock=lambda: at, send=lambda *_: None
        )
        assert decided is not None
        assert decided.verdict == "VERIFIED", decided

    with Session(pg_engine) as session:
        signed = session.scalars(select(Receipt.key_id).order_by(Receipt.operation_id)).all()
        status = dict(session.execute(select(ReceiptKey.key_id, ReceiptKey.status)).tuples().all())
    assert signed == key_ids
    assert status == {key_ids[0]: RETIRED, key_ids[1]: ACTIVE}
