"""Migrations that fill what they add: 0004 moves the correlation backlog out of the events
table and back; 0006 counts every fence scheduled before it as claimed by an observer; 0007 keys
event keys and links by what they are of, and numbers them again on the way back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Connection, inspect, text
from sqlalchemy.exc import IntegrityError

from shared.db.migrate import alembic_config, upgrade
from shared.db.session import make_engine
from tests.conftest import scratch_database
from tests.integration.conftest import insert_old_operation, insert_old_workspaces

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 30, 8, 0, 0, tzinfo=UTC)


@pytest.fixture(params=["postgresql", "sqlite"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'old.db'}"
        return
    with scratch_database() as url:
        yield url


def _rows(url: str, sql: str) -> list[tuple[object, ...]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(sql))]
    finally:
        engine.dispose()


@contextmanager
def written_at(url: str, revision: str) -> Iterator[Connection]:
    """The database migrated to ``revision``, with workspace ws_a: a transaction to write the
    rows that revision had, committed when the block exits."""
    upgrade(url, revision)
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            insert_old_workspaces(conn, "ws_a", at=T0)
            yield conn
    finally:
        engine.dispose()


def test_pending_events_keep_waiting_across_the_upgrade(empty_url: str) -> None:
    with written_at(empty_url, "0003") as conn:
        for pk, correlated in ((1, T0), (2, None), (3, None)):
            conn.execute(
                text(
                    "INSERT INTO events (id, workspace_id, provider, event_id, type, "
                    "provider_timestamp, body, raw, digest, duplicates, received_at, "
                    "correlated_at) VALUES (:pk, 'ws_a', 'stripe', :eid, 'refund.updated', "
                    ":t, '{}', :raw, 'd', 0, :t, :c)"
                ),
                {"pk": pk, "eid": f"evt_{pk}", "t": T0, "raw": b"{}", "c": correlated},
            )
    upgrade(empty_url)
    assert _rows(empty_url, "SELECT event_pk FROM event_backlog ORDER BY event_pk") == [(2,), (3,)]
    command.downgrade(alembic_config(empty_url), "0003")
    rows = _rows(empty_url, "SELECT id, correlated_at IS NULL FROM events ORDER BY id")
    assert [(int(pk), bool(waiting)) for pk, waiting in rows] == [(1, False), (2, True), (3, True)]


def test_fences_scheduled_before_the_reading_claim_count_as_claimed(empty_url: str) -> None:
    with written_at(empty_url, "0005") as conn:
        for op_id, fence in (("op_a", 0), ("op_b", 4)):
            insert_old_operation(conn, op_id, "ws_a", fence=fence, at=T0)
    upgrade(empty_url)
    rows = _rows(empty_url, "SELECT id, fence, reading_fence FROM operations ORDER BY id")
    assert rows == [("op_a", 0, 0), ("op_b", 4, 4)]
    command.downgrade(alembic_config(empty_url), "0005")
    assert _rows(empty_url, "SELECT id, fence FROM operations ORDER BY id") == [
        ("op_a", 0),
        ("op_b", 4),
    ]
    engine = make_engine(empty_url)
    try:
        assert "reading_fence" not in {c["name"] for c in inspect(engine).get_columns("operations")}
    finally:
        engine.dispose()


def _primary_key(url: str, table: str) -> list[str]:
    engine = make_engine(url)
    try:
        return list(inspect(engine).get_pk_constraint(table)["constrained_columns"])
    finally:
        engine.dispose()


def test_event_keys_and_links_are_keyed_by_what_they_are_of_after_0007(empty_url: str) -> None:
    keys = [(1, "charge", "ch_1"), (1, "object_id", "re_1"), (2, "object_id", "re_2")]
    links = [("op_a", 1, "resource_id", "strong"), ("op_a", 2, "fingerprint", "weak")]
    with written_at(empty_url, "0006") as conn:
        for pk, name, value in keys:
            conn.execute(
                text(
                    "INSERT INTO event_keys (event_pk, workspace_id, provider, name, value) "
                    "VALUES (:pk, 'ws_a', 'stripe', :name, :value)"
                ),
                {"pk": pk, "name": name, "value": value},
            )
        for op_id, pk, strategy, assurance in links:
            conn.execute(
                text(
                    "INSERT INTO operation_events (operation_id, event_pk, workspace_id, "
                    "strategy, assurance, created_at) VALUES (:op, :pk, 'ws_a', :s, :a, :t)"
                ),
                {"op": op_id, "pk": pk, "s": strategy, "a": assurance, "t": T0},
            )
    upgrade(empty_url)
    assert _primary_key(empty_url, "event_keys") == ["event_pk", "name"]
    assert _primary_key(empty_url, "operation_events") == ["operation_id", "event_pk"]
    key_sql = "SELECT event_pk, name, value FROM event_keys ORDER BY event_pk, name"
    link_sql = (
        "SELECT operation_id, event_pk, strategy, assurance FROM operation_events "
        "ORDER BY operation_id, event_pk"
    )
    assert _rows(empty_url, key_sql) == keys
    assert _rows(empty_url, link_sql) == links
    engine = make_engine(empty_url)
    try:
        with pytest.raises(IntegrityError), engine.begin() as conn:  # one value per name
            conn.execute(
                text(
                    "INSERT INTO event_keys (event_pk, workspace_id, provider, name, value) "
                    "VALUES (1, 'ws_a', 'stripe', 'charge', 'ch_2')"
                )
            )
    finally:
        engine.dispose()
    command.downgrade(alembic_config(empty_url), "0006")
    assert _primary_key(empty_url, "event_keys") == ["id"]
    assert _primary_key(empty_url, "operation_events") == ["id"]
    assert _rows(empty_url, key_sql) == keys
    assert _rows(empty_url, link_sql) == links
    numbered = "SELECT count(DISTINCT id), count(id) FROM "  # each row has an id of its own
    assert _rows(empty_url, numbered + "event_keys") == [(3, 3)]
    assert _rows(empty_url, numbered + "operation_events") == [(2, 2)]


def test_operations_verified_before_0008_are_watched_for_three_days(empty_url: str) -> None:
    """0008: a VERIFIED operation gets ``watch_until`` three days after its decision (an event
    linked to it then rechecks it); other operations get none; observations may lose their
    fence (a decision's own reading) and keep it on the way back."""
    with written_at(empty_url, "0007") as conn:
        insert_old_operation(conn, "op_v", "ws_a", fence=1, at=T0)
        insert_old_operation(conn, "op_o", "ws_a", fence=1, at=T0)
        conn.execute(
            text("UPDATE operations SET state = 'VERIFIED', decided_at = :t WHERE id = 'op_v'"),
            {"t": T0},
        )
    upgrade(empty_url)
    engine = make_engine(empty_url)
    try:
        with engine.connect() as conn:
            rows = dict(
                conn.execute(text("SELECT id, watch_until FROM operations ORDER BY id")).all()
            )
    finally:
        engine.dispose()
    assert rows["op_o"] is None
    until = rows["op_v"]
    if isinstance(until, str):  # SQLite keeps the ISO text
        until = datetime.fromisoformat(until)
    assert until.replace(tzinfo=UTC) == T0 + timedelta(days=3)
    command.downgrade(alembic_config(empty_url), "0007")
    assert "watch_until" not in {c["name"] for c in inspect_columns(empty_url, "operations")}


def inspect_columns(url: str, table: str) -> list[dict[str, object]]:
    engine = make_engine(url)
    try:
        return list(inspect(engine).get_columns(table))
    finally:
        engine.dispose()
