"""The audit chain's rows are appended when their transaction commits, from the head the
workspace row keeps: on both backends, and on PostgreSQL without holding the chain's lock
before the commit."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from shared.db.audit import GENESIS_HASH, append_transition, verify_chain, write_with_commit
from shared.db.migrate import upgrade
from shared.db.models import Transition, Workspace
from shared.db.session import make_engine, session_factory, session_scope
from tests.conftest import scratch_database
from tests.integration.api.test_persistence import _operation, _workspace
from tests.integration.conftest import insert_old_operation, insert_old_workspaces

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 30, 8, 0, 0, 123456, tzinfo=UTC)


def _append(session: Session, reason: str, *, ws: str = "ws_a", details: object = None) -> None:
    append_transition(
        session,
        workspace_id=ws,
        operation_id="op_1",
        from_state="OBSERVING",
        to_state="PENDING",
        verdict="PENDING",
        reason=reason,
        cause="test",
        now=T0,
        details=details,  # type: ignore[arg-type]
    )


def _rows(engine: Engine) -> list[tuple[int, str, str, str | None]]:
    with session_scope(engine) as s:
        found = s.execute(
            select(Transition.seq, Transition.prev_hash, Transition.hash, Transition.reason)
            .where(Transition.workspace_id == "ws_a")
            .order_by(Transition.seq)
        ).all()
        return [(r.seq, r.prev_hash, r.hash, r.reason) for r in found]


def _seed(engine: Engine) -> None:
    """Workspace ws_a (its chain at the genesis head) with operation op_1."""
    with session_scope(engine) as s:
        _workspace(s)
        _operation(s)


def _head(engine: Engine) -> tuple[int, str, str]:
    with session_scope(engine) as s:
        ws = s.get(Workspace, "ws_a")
        assert ws is not None
        return ws.chain_seq, ws.chain_prev_hash, ws.chain_hash


def test_rows_are_written_at_commit_and_the_head_follows(engine: Engine) -> None:
    _seed(engine)
    assert _head(engine) == (0, GENESIS_HASH, GENESIS_HASH)
    with session_scope(engine) as s:
        _append(s, "first", details={"seq": 99, "note": "héllo ✓"})
        _append(s, "second")
        # Queued, not yet in the table.
        assert s.scalar(select(Transition.id).limit(1)) is None
    rows = _rows(engine)
    assert [(seq, reason) for seq, _, _, reason in rows] == [(1, "first"), (2, "second")]
    assert rows[0][1] == GENESIS_HASH
    assert rows[1][1] == rows[0][2]
    assert _head(engine) == (2, rows[1][1], rows[1][2])
    with session_scope(engine) as s:
        # The hashes the database computed are the ones transition_hash computes.
        assert verify_chain(s, "ws_a") is None


def test_a_rolled_back_transaction_appends_nothing(engine: Engine) -> None:
    _seed(engine)

    def failing_task() -> None:
        with session_scope(engine) as s:
            _append(s, "lost")
            raise RuntimeError("the task failed")

    with pytest.raises(RuntimeError):
        failing_task()
    session = session_factory(engine)()
    _append(session, "lost too")
    session.rollback()
    session.commit()  # the queue went with the rollback
    session.close()
    with session_scope(engine) as s:
        _append(s, "kept")
    assert [(seq, reason) for seq, _, _, reason in _rows(engine)] == [(1, "kept")]


def _queue_and_fail(
    s: Session,
    reason: str | None,
    *,
    inner: str | None = None,
    write: tuple[str, dict[str, str]] | None = None,
) -> None:
    """Queue in a savepoint (and in a released savepoint inside it), then fail it."""
    with s.begin_nested():
        if reason is not None:
            _append(s, reason)
        if write is not None:
            write_with_commit(s, *write)
        if inner is not None:
            with s.begin_nested():
                _append(s, inner)
        raise RuntimeError("this operation failed")


def test_a_rolled_back_savepoint_takes_back_what_it_queued(engine: Engine) -> None:
    """What a savepoint queued goes with its rollback; what was queued before it, and what a
    released savepoint queued, is appended at the commit (the sweeper decides each operation of
    a batch in a savepoint of one transaction)."""
    _seed(engine)
    with session_scope(engine) as s:
        _append(s, "before")
        with pytest.raises(RuntimeError):
            _queue_and_fail(s, "rolled back", inner="inner, released")
        with s.begin_nested():
            _append(s, "released")
        with pytest.raises(RuntimeError):
            _queue_and_fail(s, "rolled back too")
        _append(s, "after")
    assert [reason for _, _, _, reason in _rows(engine)] == ["before", "released", "after"]
    with session_scope(engine) as s:
        assert verify_chain(s, "ws_a") is None


def test_a_write_queued_for_the_commit_goes_with_its_savepoint(pg_engine: Engine) -> None:
    _seed(pg_engine)
    statement = "UPDATE workspaces SET name = %(name)s WHERE id = 'ws_a'"
    with session_scope(pg_engine) as s:
        with pytest.raises(RuntimeError):
            _queue_and_fail(s, None, write=(statement, {"name": "from a rolled-back savepoint"}))
        _append(s, "kept")
    with session_scope(pg_engine) as s:
        assert s.scalar(select(Workspace.name).where(Workspace.id == "ws_a")) == "ws_a"
    with session_scope(pg_engine) as s:
        write_with_commit(s, statement, {"name": "written at the commit"})
    with session_scope(pg_engine) as s:
        assert s.scalar(select(Workspace.name).where(Workspace.id == "ws_a")) == (
            "written at the commit"
        )


def test_a_commit_outside_session_scope_still_appends(engine: Engine) -> None:
    _seed(engine)
    session = session_factory(engine)()
    _append(session, "plain commit")
    session.commit()
    session.close()
    assert [(seq, reason) for seq, _, _, reason in _rows(engine)] == [(1, "plain commit")]
    with session_scope(engine) as s:
        assert verify_chain(s, "ws_a") is None


def test_an_unknown_workspace_fails_the_whole_transaction(engine: Engine) -> None:
    _seed(engine)

    def append_nowhere() -> None:
        with session_scope(engine) as s:
            s.execute(text("UPDATE workspaces SET name = 'changed' WHERE id = 'ws_a'"))
            _append(s, "nowhere", ws="ws_gone")

    with pytest.raises(LookupError, match="ws_gone"):
        append_nowhere()
    with session_scope(engine) as s:
        assert s.scalar(select(Workspace.name).where(Workspace.id == "ws_a")) == "ws_a"
        assert s.scalar(select(Transition.id).limit(1)) is None


def test_an_open_transaction_does_not_hold_the_chain(pg_engine: Engine) -> None:
    """Appending queues: another appender of the workspace is not blocked until the commit."""
    _seed(pg_engine)
    slow = session_factory(pg_engine)()
    _append(slow, "committed second")
    slow.execute(text("SELECT 1"))  # its transaction is open on the server
    with session_scope(pg_engine) as s:
        s.execute(text("SET LOCAL lock_timeout = '2s'"))  # a held lock fails, not hangs
        _append(s, "committed first")
    slow.commit()
    slow.close()
    rows = _rows(pg_engine)
    assert [(seq, reason) for seq, _, _, reason in rows] == [
        (1, "committed first"),
        (2, "committed second"),
    ]
    with session_scope(pg_engine) as s:
        assert verify_chain(s, "ws_a") is None


def _chain_before_0003(session: Session) -> None:
    """Three rows written the way revisions before 0003 wrote them (no head on the workspace)."""
    from shared.db.audit import transition_hash

    prev = GENESIS_HASH
    for seq in (1, 2, 3):
        fields = {
            "workspace_id": "ws_a",
            "seq": seq,
            "operation_id": "op_1",
            "from_state": None,
            "to_state": "PENDING",
            "verdict": None,
            "reason": f"r{seq}",
            "cause": "test",
            "details": None,
            "created_at": T0 + timedelta(seconds=seq),
        }
        digest = transition_hash(prev, fields)
        session.execute(
            Transition.__table__.insert(), {**fields, "prev_hash": prev, "hash": digest}
        )
        prev = digest


def _upgrade_from_0002(url: str) -> None:
    upgrade(url, "0002")
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            insert_old_workspaces(conn, "ws_a", "ws_b", at=T0)
            insert_old_operation(conn, "op_1", "ws_a", fence=0, at=T0)
        with session_scope(engine) as s:
            _chain_before_0003(s)
    finally:
        engine.dispose()
    upgrade(url)
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            last = s.execute(
                select(Transition.seq, Transition.prev_hash, Transition.hash).where(
                    Transition.seq == 3
                )
            ).one()
            heads = {
                ws.id: (ws.chain_seq, ws.chain_prev_hash, ws.chain_hash)
                for ws in s.scalars(select(Workspace))
            }
        assert heads == {
            "ws_a": (3, last.prev_hash, last.hash),
            "ws_b": (0, GENESIS_HASH, GENESIS_HASH),
        }
        with session_scope(engine) as s:  # the chain goes on from the head it was given
            _append(s, "after the upgrade")
        with session_scope(engine) as s:
            assert verify_chain(s, "ws_a") is None
            assert s.scalar(select(Workspace.chain_seq).where(Workspace.id == "ws_a")) == 4
    finally:
        engine.dispose()


def test_upgrade_gives_an_existing_chain_its_head_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    sqlite3.connect(path).close()
    _upgrade_from_0002(f"sqlite:///{path}")


def test_upgrade_gives_an_existing_chain_its_head_postgresql() -> None:
    with scratch_database() as url:
        _upgrade_from_0002(url)
