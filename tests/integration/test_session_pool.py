"""PostgreSQL pool: a connection the server dropped while idle is replaced at checkout, and a
connection used a moment ago is handed out without a ping."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, event, text

from shared.db import session as db_session
from shared.db.session import make_engine, read_connection, session_scope

pytestmark = pytest.mark.integration


@pytest.fixture
def engine(migrated_postgres_url: str) -> Iterator[Engine]:
    engine = make_engine(migrated_postgres_url, pool_size=1, max_overflow=0)
    yield engine
    engine.dispose()


def _backend_pid(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _terminate(url_engine: Engine, pid: int) -> None:
    with url_engine.connect() as admin:
        admin.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        admin.commit()


def test_an_idle_connection_the_server_dropped_is_replaced(
    engine: Engine, migrated_postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_session, "IDLE_PING_AFTER_S", 0.05)
    first = _backend_pid(engine)
    admin = make_engine(migrated_postgres_url, pool_size=1, max_overflow=0)
    try:
        _terminate(admin, first)
    finally:
        admin.dispose()
    time.sleep(0.2)  # idle for longer than the ping threshold
    with session_scope(engine) as session:
        assert session.execute(text("SELECT 1")).scalar_one() == 1
    with read_connection(engine) as conn:
        assert conn.execute(text("SELECT 1")).scalar_one() == 1
    assert _backend_pid(engine) != first


def test_a_connection_used_a_moment_ago_is_not_pinged(engine: Engine) -> None:
    _backend_pid(engine)  # the pool holds one connection, just used
    pings: list[object] = []
    dialect = engine.dialect
    original = dialect.do_ping

    def counted(dbapi_conn: object) -> bool:
        pings.append(dbapi_conn)
        return original(dbapi_conn)

    dialect.do_ping = counted  # type: ignore[method-assign]
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    try:
        for _ in range(5):
            with session_scope(engine) as session:
                session.execute(text("SELECT 1"))
    finally:
        dialect.do_ping = original  # type: ignore[method-assign]
    assert pings == []
    assert statements == ["SELECT 1"] * 5
