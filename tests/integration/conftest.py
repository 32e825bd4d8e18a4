"""Migrated databases for integration tests: the real Alembic migrations, isolated per test.

- ``migrated_postgres_url`` (session): the session's PostgreSQL database at head.
- ``pg_engine``: an engine on it; every table is truncated after the test.
- ``sqlite_url`` / ``sqlite_engine``: a fresh migrated SQLite file per test (a copy of a
  template migrated once per session).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, text

from shared.db.migrate import upgrade
from shared.db.models import Base
from shared.db.session import make_engine

__all__ = ["insert_old_operation", "insert_old_workspaces", "truncate_all"]


def truncate_all(engine: Engine) -> None:
    """Empty every application table (not ``alembic_version``)."""
    names = [table.name for table in Base.metadata.sorted_tables]
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SET LOCAL lock_timeout = '30s'"))
            quoted = ", ".join(f'"{name}"' for name in names)
            conn.execute(text(f"TRUNCATE {quoted} RESTART IDENTITY CASCADE"))
        else:
            for name in reversed(names):
                conn.execute(text(f'DELETE FROM "{name}"'))  # noqa: S608 (metadata names)


def insert_old_workspaces(connection: Connection, *workspace_ids: str, at: datetime) -> None:
    """Workspace rows of the columns every revision has, named after their ids' last letter."""
    for workspace_id in workspace_ids:
        connection.execute(
            text("INSERT INTO workspaces (id, name, created_at) VALUES (:id, :name, :t)"),
            {"id": workspace_id, "name": workspace_id[-1], "t": at},
        )


def insert_old_operation(
    connection: Connection, op_id: str, workspace_id: str, *, fence: int, at: datetime
) -> None:
    """An operation row of only the columns that every revision of the schema has (tests that
    upgrade a database written by an older revision; the ORM model has the newest columns)."""
    connection.execute(
        text(
            "INSERT INTO operations (id, workspace_id, contract_id, contract_version, "
            "contract_hash, completion_level, state, final, version, input, learned_keys, "
            "attempts, fence, created_at, updated_at) VALUES (:id, :ws, "
            "'stripe.refund.succeeded', '1', 'h', 'settled', 'OBSERVING', false, 1, '{}', '{}', "
            "0, :fence, :t, :t)"
        ),
        {"id": op_id, "ws": workspace_id, "fence": fence, "t": at},
    )


@pytest.fixture(scope="session")
def migrated_postgres_url(postgres_url: str) -> str:
    """The session's PostgreSQL database, migrated to head with the real migrations."""
    upgrade(postgres_url)
    return postgres_url


@pytest.fixture(scope="session")
def _pg_session_engine(migrated_postgres_url: str) -> Iterator[Engine]:
    engine = make_engine(migrated_postgres_url)
    yield engine
    engine.dispose()


@pytest.fixture
def pg_engine(_pg_session_engine: Engine) -> Iterator[Engine]:
    """An engine on the migrated PostgreSQL database; all tables are emptied after the test."""
    truncate_all(_pg_session_engine)
    yield _pg_session_engine
    truncate_all(_pg_session_engine)


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "provely.db"
    # upgrade() disposes its engine: the last connection to close folds the WAL into the file,
    # so a plain copy carries the whole schema.
    upgrade(f"sqlite:///{path}")
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    return path


@pytest.fixture
def sqlite_url(_sqlite_template: Path, tmp_path: Path) -> str:
    """A fresh, migrated SQLite database file for this test."""
    path = tmp_path / "provely.db"
    shutil.copyfile(_sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def sqlite_engine(sqlite_url: str) -> Iterator[Engine]:
    engine = make_engine(sqlite_url)
    yield engine
    engine.dispose()
