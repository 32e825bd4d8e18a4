"""A sweeper pass reads what is due, not the whole operations table.

A pass runs every few seconds over every open operation; a query that scans the table — or a
whole index — makes each pass linear in the number of operations ever made (bench/scale.py: at
20,000 operations the deadline step scanned the table, 50 ms, and the schedule step read all of
an index that led with ``final``). Here 5,000 open operations wait in long backoff with their
deadline days away, none due; each query of a real pass is run again under ``EXPLAIN (ANALYZE,
BUFFERS)`` and must touch a handful of pages, where reading the table or an index of 5,000 rows
takes dozens to hundreds.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from services.verdict.sweeper import Sweeper
from shared.runtime.settings import get_settings
from tests.integration.conftest import insert_old_operation, insert_old_workspaces

pytestmark = pytest.mark.integration

OPEN = 5000
MOST_PAGES = 12


def _pass_statements(engine: Engine) -> list[tuple[str, Any]]:
    captured: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        captured.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    try:
        Sweeper(engine, get_settings()).sweep_once()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return captured


def _open_operations(engine: Engine, now: datetime) -> None:
    with engine.begin() as conn:
        insert_old_workspaces(conn, "ws_a", at=now)
        insert_old_operation(conn, "op_0", "ws_a", fence=1, at=now)
        conn.execute(
            text(
                "INSERT INTO operations (id, workspace_id, contract_id, contract_version, "
                "contract_hash, completion_level, state, final, version, input, learned_keys, "
                "attempts, fence, created_at, updated_at, next_observation_at, deadline, "
                "enqueued_at) SELECT 'op_' || g, workspace_id, contract_id, contract_version, "
                "contract_hash, completion_level, state, final, version, input, learned_keys, "
                "attempts, fence, created_at, updated_at, :t + g * interval '1 minute', "
                ":t + interval '7 days', :t FROM operations, generate_series(1, :n) g "
                "WHERE id = 'op_0'"
            ),
            {"t": now, "n": OPEN},
        )
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(
            text("VACUUM (ANALYZE) operations")
        )


def test_a_sweeper_pass_reads_a_few_pages_of_operations(pg_engine: Engine) -> None:
    _open_operations(pg_engine, datetime.now(UTC) + timedelta(hours=1))
    selects = [
        (statement, parameters)
        for statement, parameters in _pass_statements(pg_engine)
        if statement.lstrip().upper().startswith("SELECT") and "FROM operations" in statement
    ]
    assert len(selects) >= 2, "a pass reads the schedule and the deadlines"
    heavy = []
    with pg_engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        with raw.cursor() as cur:
            for statement, parameters in selects:
                cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, parameters)
                (plan,) = cur.fetchone()
                plan = plan[0]["Plan"] if isinstance(plan, list) else json.loads(plan)[0]["Plan"]
                pages = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
                if pages > MOST_PAGES:
                    heavy.append((pages, " ".join(statement.split())[-240:]))
        raw.rollback()
    assert heavy == []
