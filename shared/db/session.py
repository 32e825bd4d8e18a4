"""Engines and sessions: PostgreSQL through psycopg 3, SQLite for the embedded default.

The request or the task owns the transaction: it opens one with :func:`session_scope`, which
commits on success and rolls back on any error. Repositories and the core never commit.

SQLite connections get WAL, foreign keys and a busy timeout, and every transaction starts with
``BEGIN IMMEDIATE`` so that two writers never deadlock on a lock upgrade: SQLite serialises
writers, and a writer waits (up to the busy timeout) instead of failing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

__all__ = [
    "dispose_engines",
    "get_engine",
    "is_postgres",
    "is_sqlite",
    "make_engine",
    "session_factory",
    "session_scope",
]

SQLITE_BUSY_TIMEOUT_MS = 30_000

_engines: dict[str, Engine] = {}
_factories: dict[int, sessionmaker[Session]] = {}
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


def make_engine(url: str, **kwargs: Any) -> Engine:
    """A new engine for ``url`` (not cached). Extra keyword arguments go to ``create_engine``."""
    url = _normalise_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        kwargs.setdefault("connect_args", {}).setdefault("check_same_thread", False)
        kwargs["connect_args"].setdefault("timeout", SQLITE_BUSY_TIMEOUT_MS / 1000)
        engine = create_engine(url, **kwargs)
        _install_sqlite_hooks(engine)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 20)
    return create_engine(url, **kwargs)


def get_engine(url: str | None = None) -> Engine:
    """The process-wide engine for ``url`` (default: the settings' database), created once."""
    if url is None:
        from shared.settings import get_settings

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
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def is_postgres(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"
