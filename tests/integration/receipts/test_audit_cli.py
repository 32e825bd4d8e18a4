"""`provely audit verify --workspace W` on PostgreSQL, run as its own process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select, text

from shared.db.models import Operation, Transition
from shared.db.session import session_scope
from shared.runtime.settings import Settings
from tests.integration.receipts.conftest import RefundFlow

pytestmark = pytest.mark.integration


def provely(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    script = shutil.which("provely", path=str(Path(sys.executable).parent))
    assert script is not None
    env = dict(os.environ)
    env["PROVELY_DATABASE_URL"] = settings.resolved_database_url()
    env["PROVELY_SECRET_KEY"] = settings.secret_key or ""
    return subprocess.run(
        [script, *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def _chain(flow: RefundFlow) -> list[tuple[int, int]]:
    with session_scope(flow.engine) as s:
        flow.verified(s)
        other = RefundFlow(flow.engine, operation_id="op_2", refund_id="re_2")
        other.verified(s)
        op = s.get(Operation, "op_2")
        assert op is not None
    with session_scope(flow.engine) as s:  # transitions are appended when the first commits
        rows = s.execute(
            select(Transition.id, Transition.seq)
            .where(Transition.workspace_id == "ws_a")
            .order_by(Transition.seq)
        ).all()
        return [(int(r.id), int(r.seq)) for r in rows]


def test_intact_chain_exits_0(flow: RefundFlow, settings: Settings) -> None:
    rows = _chain(flow)
    assert len(rows) >= 2
    done = provely(settings, "audit", "verify", "--workspace", "ws_a")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"intact: workspace ws_a, {len(rows)} transitions")
    done = provely(settings, "audit", "verify", "--workspace", "ws_a", "--json")
    assert json.loads(done.stdout)["result"] == "intact"


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("reason", "'edited'"),
        ("to_state", "'FAILED'"),
        ("details", "'{\"x\": 1}'::json"),
        ("created_at", "created_at + interval '1 second'"),
        ("prev_hash", "repeat('0', 64)"),
    ],
)
def test_editing_one_transition_row_names_it(
    flow: RefundFlow, settings: Settings, column: str, value: str
) -> None:
    rows = _chain(flow)
    target_id, target_seq = rows[1]
    with flow.engine.begin() as conn:
        conn.execute(
            text(f"UPDATE transitions SET {column} = {value} WHERE id = :id"),  # noqa: S608
            {"id": target_id},
        )
    done = provely(settings, "audit", "verify", "--workspace", "ws_a")
    assert done.returncode == 1
    assert f"transition id={target_id} seq={target_seq}" in done.stderr
    assert "Traceback" not in done.stderr
    done = provely(settings, "audit", "verify", "--workspace", "ws_a", "--json")
    assert done.returncode == 1
    broken = json.loads(done.stdout)["broken"]
    assert (broken["id"], broken["seq"]) == (target_id, target_seq)


def test_deleting_a_row_names_the_row_after_the_gap(flow: RefundFlow, settings: Settings) -> None:
    rows = _chain(flow)
    assert len(rows) == 4
    with flow.engine.begin() as conn:
        conn.execute(text("DELETE FROM transitions WHERE id = :id"), {"id": rows[1][0]})
    done = provely(settings, "audit", "verify", "--workspace", "ws_a")
    assert done.returncode == 1
    assert f"transition id={rows[2][0]} seq={rows[2][1]}" in done.stderr
    assert "seq_gap" in done.stderr


def test_cutting_the_tail_is_found(flow: RefundFlow, settings: Settings) -> None:
    """The chain still holds without its last row; the operation's state gives it away."""
    rows = _chain(flow)
    with flow.engine.begin() as conn:
        conn.execute(text("DELETE FROM transitions WHERE id = :id"), {"id": rows[-1][0]})
    done = provely(settings, "audit", "verify", "--workspace", "ws_a")
    assert done.returncode == 1
    assert "operation op_2 is VERIFIED" in done.stderr
    assert f"transition id={rows[-2][0]} seq={rows[-2][1]}" in done.stderr
    with flow.engine.begin() as conn:
        conn.execute(text("DELETE FROM transitions WHERE operation_id = 'op_2'"))
    done = provely(settings, "audit", "verify", "--workspace", "ws_a", "--json")
    assert done.returncode == 1
    assert json.loads(done.stdout)["broken"]["problem"] == "operation_without_transitions"


def test_cutting_the_tail_and_mending_the_state_is_found(
    flow: RefundFlow, settings: Settings
) -> None:
    """The last row cut and the operation's state put back where the row before leads: the
    head the workspace recorded still tells."""
    rows = _chain(flow)
    with flow.engine.begin() as conn:
        before = conn.execute(
            text("SELECT to_state FROM transitions WHERE id = :id"), {"id": rows[-2][0]}
        ).scalar_one()
        conn.execute(text("DELETE FROM transitions WHERE id = :id"), {"id": rows[-1][0]})
        conn.execute(text("UPDATE operations SET state = :s WHERE id = 'op_2'"), {"s": before})
    done = provely(settings, "audit", "verify", "--workspace", "ws_a")
    assert done.returncode == 1, done.stdout
    assert (
        f"records its chain's head at seq {rows[-1][1]}, its last transition is seq "
        f"{rows[-2][1]}: head_mismatch" in done.stderr
    )
    done = provely(settings, "audit", "verify", "--workspace", "ws_a", "--json")
    broken = json.loads(done.stdout)["broken"]
    assert (broken["problem"], broken["id"], broken["head_seq"]) == (
        "head_mismatch",
        rows[-2][0],
        rows[-1][1],
    )


def test_editing_an_operation_state_is_found(flow: RefundFlow, settings: Settings) -> None:
    _chain(flow)
    with flow.engine.begin() as conn:
        conn.execute(text("UPDATE operations SET state = 'FAILED' WHERE id = 'op_1'"))
    done = provely(settings, "audit", "verify", "--workspace", "ws_a")
    assert done.returncode == 1
    assert "operation op_1 is FAILED" in done.stderr


def test_unknown_workspace_and_usage(flow: RefundFlow, settings: Settings) -> None:
    done = provely(settings, "audit", "verify", "--workspace", "ws_nope")
    assert done.returncode == 2
    assert done.stderr.strip() == "cannot check: no workspace ws_nope"
    done = provely(settings, "audit", "verify")
    assert done.returncode == 2
    assert "--workspace" in done.stderr


def test_all_workspaces(flow: RefundFlow, settings: Settings) -> None:
    _chain(flow)
    with session_scope(flow.engine) as s:
        RefundFlow(flow.engine, workspace_id="ws_b", operation_id="op_b").verified(s)
    done = provely(settings, "audit", "verify", "--all", "--json")
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert {r["workspace_id"] for r in results} == {"ws_a", "ws_b"}
    assert all(r["result"] == "intact" for r in results)


def test_unreachable_database_exits_2(settings: Settings) -> None:
    broken = Settings(database_url="postgresql+psycopg://postgres@127.0.0.1:1/nothing")
    done = provely(broken, "audit", "verify", "--workspace", "ws_a")
    assert done.returncode == 2
    assert done.stderr.startswith("error: cannot read the database")
