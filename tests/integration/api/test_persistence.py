"""The record itself: migrations match the models, the audit chain, fenced state changes."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, select, text
from sqlalchemy.orm import Session

from shared.core import IllegalTransition
from shared.core.types import OperationState
from shared.db.audit import append_transition, verify_chain
from shared.db.models import Base, Operation, Transition, Workspace
from shared.db.session import session_factory, session_scope
from shared.lifecycle.contracts import contract_for, find_contract
from shared.lifecycle.operations import change_state, facts_for

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 30, 8, 0, 0, 123456, tzinfo=UTC)


def _workspace(session: Session, ws_id: str = "ws_a") -> Workspace:
    ws = Workspace(id=ws_id, name=ws_id, created_at=T0)
    session.add(ws)
    session.flush()
    return ws


def _operation(session: Session, ws_id: str = "ws_a", op_id: str = "op_1") -> Operation:
    resolved = find_contract(session, ws_id, "stripe.refund.succeeded")
    op = Operation(
        id=op_id,
        workspace_id=ws_id,
        contract_id=resolved.contract.id,
        contract_version=resolved.contract.version,
        contract_hash=resolved.hash,
        completion_level=resolved.contract.completion_level,
        state="CREATED",
        input={"charge": "ch_1", "amount": 500, "currency": "usd"},
        learned_keys={},
        created_at=T0,
        updated_at=T0,
    )
    session.add(op)
    session.flush()
    return op


def test_migrations_match_the_models(engine: Engine) -> None:
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
    assert set(inspect(engine).get_table_names()) >= {t.name for t in Base.metadata.sorted_tables}


def test_datetimes_come_back_aware_utc(engine: Engine) -> None:
    with session_scope(engine) as s:
        _workspace(s)
    with session_scope(engine) as s:
        ws = s.get(Workspace, "ws_a")
        assert ws is not None
        assert ws.created_at == T0
        assert ws.created_at.tzinfo is not None


def test_audit_chain_holds_and_names_an_edited_row(engine: Engine) -> None:
    with session_scope(engine) as s:
        _workspace(s)
        _operation(s)
        for i in range(5):
            append_transition(
                s,
                workspace_id="ws_a",
                operation_id="op_1",
                from_state="OBSERVING",
                to_state="PENDING",
                verdict="PENDING",
                reason=f"r{i}",
                cause="test",
                now=T0 + timedelta(seconds=i),
                details={"i": i},
            )
    with session_scope(engine) as s:
        assert verify_chain(s, "ws_a") is None
        third = s.execute(select(Transition).where(Transition.seq == 3)).scalar_one()
        third_id = third.id
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE transitions SET reason = 'edited' WHERE id = :id"), {"id": third_id}
        )
    with session_scope(engine) as s:
        broken = verify_chain(s, "ws_a")
        assert broken is not None
        assert broken.id == third_id
        assert broken.problem == "hash_mismatch"


def test_concurrent_appends_keep_one_chain(pg_engine: Engine) -> None:
    with session_scope(pg_engine) as s:
        _workspace(s)
        _operation(s)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(10):
                with session_scope(pg_engine) as s:
                    append_transition(
                        s,
                        workspace_id="ws_a",
                        operation_id="op_1",
                        from_state=None,
                        to_state="PENDING",
                        verdict=None,
                        reason=f"{n}-{i}",
                        cause="test",
                        now=datetime.now(UTC),
                    )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with session_scope(pg_engine) as s:
        seqs = s.execute(select(Transition.seq).order_by(Transition.seq)).scalars().all()
        assert seqs == list(range(1, 81))
        assert verify_chain(s, "ws_a") is None


def test_change_state_is_fenced_by_version(engine: Engine) -> None:
    with session_scope(engine) as s:
        _workspace(s)
        _operation(s)
    # A reader that loaded the operation at version 1 (and committed, keeping its copy).
    s1 = session_factory(engine)()
    op1 = s1.get(Operation, "op_1")
    assert op1 is not None
    s1.commit()
    with session_scope(engine) as s2:
        op2 = s2.get(Operation, "op_1")
        assert op2 is not None
        assert change_state(
            s2,
            op2,
            receipt=False,
            to_state=OperationState.ACTION_STARTED,
            verdict=None,
            reason=None,
            verdict_class=None,
            final=False,
            decision=None,
            cause="action_started",
            now=T0,
        )
        assert op2.version == 2
    # op1 still carries version 1: it lost the race and nothing is written.
    assert not change_state(
        s1,
        op1,
        receipt=False,
        to_state=OperationState.ACTION_STARTED,
        verdict=None,
        reason=None,
        verdict_class=None,
        final=False,
        decision=None,
        cause="action_started",
        now=T0,
    )
    s1.rollback()
    s1.close()
    with session_scope(engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        assert op.state == "ACTION_STARTED"
        assert op.version == 2
        rows = s.execute(select(Transition)).scalars().all()
        assert [(r.from_state, r.to_state, r.cause) for r in rows] == [
            ("CREATED", "ACTION_STARTED", "action_started")
        ]
        with pytest.raises(IllegalTransition):
            change_state(
                s,
                op,
                receipt=False,
                to_state=OperationState.VERIFIED,
                verdict="VERIFIED",
                reason="x",
                verdict_class=None,
                final=True,
                decision=None,
                cause="test",
                now=T0,
            )


def test_facts_and_contract_of_an_operation(engine: Engine) -> None:
    with session_scope(engine) as s:
        _workspace(s)
        op = _operation(s)
        facts = facts_for(op)
        assert facts.id == "op_1"
        assert facts.input["amount"] == 500
        contract = contract_for(s, op)
        assert contract.id == "stripe.refund.succeeded"
