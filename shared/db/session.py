"""Engines and sessions: PostgreSQL through psycopg 3, SQLite for the embedded default.

The request or the task owns the transaction: it opens one with :func:`session_scope`, which
commits on success and rolls back on any error. Repositories and the core never commit.

PostgreSQL connections are checked before use only when they sat idle in the pool for more
than ``IDLE_PING_AFTER_S`` (a connection that was used a moment ago is alive; pinging it on every
checkout cost a round trip per transaction). A connection that the server dropped while in use
fails its statement: SQLAlchemy then marks every pooled connection of that age as invalid, so
the next checkouts reconnect, and the task's failure is recovered like any other (the sweeper).

SQLite connections get WAL, foreign keys and a busy timeout, and every transaction starts with
``BEGIN IMMEDIATE`` so that two writers never deadlock on a lock upgrade: SQLite serialises
writers, and a writer waits (up to the busy timeout) instead of failing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, exc
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from shared.db.audit import commit
from shared.runtime.datafiles import private_file

__all__ = [
    "dispose_engines",
    "get_engine",
    "is_postgres",
    "is_sqlite",
    "make_engine",
    "read_connection",
    "session_factory",
    "session_scope",
    "single_statements",
]

SQLITE_BUSY_TIMEOUT_MS = 30_000

IDLE_PING_AFTER_S = 1.0
"""A pooled PostgreSQL connection idle for longer than this is pinged before it is handed out."""

_LAST_USED = "provely_last_used"

_engines: dict[str, Engine] = {}
_factories: dict[int, sessionmaker[Session]] = {}
_autocommit: dict[int, tuple[Engine, Engine]] = {}
_lock = threading.Lock()


def _normalise_url(url: str) -> str:
    """Route plain ``postgresql://`` URLs to psycopg 3 (SQLAlchemy's default is psycopg2)."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def _install_sqlite_hooks(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Take transaction control away from the driver so BEGIN IMMEDIATE can be issued.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _install_idle_ping(engine: Engine) -> None:
    """Ping a pooled connection at checkout only when it has been idle (see the module doc)."""
    dialect = engine.dialect

    @event.listens_for(engine, "connect")
    def _on_connect(_dbapi_conn: Any, record: Any) -> None:
        record.info[_LAST_USED] = time.monotonic()

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_conn: Any, record: Any) -> None:
        if record is not None:
            record.info[_LAST_USED] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        last = record.info.get(_LAST_USED)
        if last is not None and time.monotonic() - last <= IDLE_PING_AFTER_S:
            return
        try:
            alive = dialect.do_ping(dbapi_conn)
        except Exception as error:  # the pool discards it and connects again
            raise exc.DisconnectionError(f"idle connection is gone: {error}") from error
        if not alive:
            raise exc.DisconnectionError("idle connection is gone")


def _install_binary_arrays(engine: Engine) -> None:
    """Send list parameters (``= ANY(:ids)``, the ``unnest`` inserts) in PostgreSQL's binary
    array format. psycopg's text format quotes and escapes every element in Python, about six
    times the work per element (``docs/benchmarks.md``, Ingest); the server reads binary arrays
    without parsing them either. SQLAlchemy still casts each parameter to its column's array
    type, so an empty or all-null list keeps its type."""
    from psycopg.types.array import ListBinaryDumper

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.adapters.register_dumper(list, ListBinaryDumper)


def make_engine(url: str, **kwargs: Any) -> Engine:
    """A new engine for ``url`` (not cached). Extra keyword arguments go to ``create_engine``."""
    url = _normalise_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:" and not database.startswith("file:"):
            private_file(Path(database))  # 0600 in a 0700 directory (shared.runtime.datafiles)
        kwargs.setdefault("connect_args", {}).setdefault("check_same_thread", False)
        kwargs["connect_args"].setdefault("timeout", SQLITE_BUSY_TIMEOUT_MS / 1000)
        engine = create_engine(url, **kwargs)
        _install_sqlite_hooks(engine)
        return engine
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 20)
    engine = create_engine(url, **kwargs)
    if engine.dialect.driver == "psycopg":
        _install_binary_arrays(engine)
    if not kwargs.get("pool_pre_ping"):
        _install_idle_ping(engine)
    return engine


def get_engine(url: str | None = None) -> Engine:
    """The process-wide engine for ``url`` (default: the settings' database), created once."""
    if url is None:
        from shared.runtime.settings import get_settings

        url = get_settings().resolved_database_url()
    key = _normalise_url(url)
    with _lock:
        engine = _engines.get(key)
        if engine is None:
            engine = make_engine(key)
            _engines[key] = engine
        return engine


def dispose_engines() -> None:
    """Close every cached engine's pool (tests, and after a fork)."""
    with _lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()
        _factories.clear()
        _autocommit.clear()


def session_factory(engine: Engine | None = None) -> sessionmaker[Session]:
    """A session factory bound to ``engine`` (default: :func:`get_engine`)."""
    engine = engine or get_engine()
    with _lock:
        factory = _factories.get(id(engine))
        if factory is None or factory.kw.get("bind") is not engine:
            factory = sessionmaker(bind=engine, expire_on_commit=False, autoflush=True)
            _factories[id(engine)] = factory
        return factory


@contextmanager
def session_scope(engine: Engine | None = None) -> Iterator[Session]:
    """One transaction: commit when the block succeeds, roll back when it raises."""
    session = session_factory(engine)()
    try:
        yield session
        commit(session)  # the audit chain's queued rows last, then COMMIT
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def _autocommit_engine(engine: Engine) -> Engine:
    with _lock:
        found = _autocommit.get(id(engine))
        if found is None or found[0] is not engine:
            found = (engine, engine.execution_options(isolation_level="AUTOCOMMIT"))
            _autocommit[id(engine)] = found
        return found[1]


@contextmanager
def read_connection(engine: Engine | None = None) -> Iterator[Connection]:
    """A connection that only reads, and needs no snapshot shared between its statements.

    On PostgreSQL each statement runs on its own (autocommit): no BEGIN and COMMIT round trips.
    Elsewhere it is one transaction, ended when the block exits. Never write through it.
    """
    engine = engine or get_engine()
    if engine.dialect.name != "postgresql":
        with engine.begin() as connection:
            yield connection
        return
    with _autocommit_engine(engine).connect() as connection:
        yield connection


@contextmanager
def single_statements(engine: Engine | None = None) -> Iterator[Connection]:
    """A connection on which each statement is a transaction of its own: for a write that is
    one statement and is committed before anything else happens (one round trip, where
    BEGIN, the statement and COMMIT took three).

    On PostgreSQL each statement commits when it returns (autocommit). Elsewhere the block is
    one transaction, committed when it exits. Never run two statements that must commit
    together through it.
    """
    engine = engine or get_engine()
    if engine.dialect.name != "postgresql":
        with engine.begin() as connection:
            yield connection
        return
    with _autocommit_engine(engine).connect() as connection:
        yield connection


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def is_postgres(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"
