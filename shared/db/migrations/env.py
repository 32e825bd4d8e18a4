"""Alembic environment: the URL comes from the Alembic config (set by ``shared.db.migrate``),
else from the settings (``PROVELY_DATABASE_URL``). SQLite runs in batch mode."""

from __future__ import annotations

from typing import Any, Literal

from alembic import context
from sqlalchemy import Engine, text

from shared.db.models import Base, UtcDateTime
from shared.db.session import make_engine

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from shared.runtime.settings import get_settings

    return get_settings().resolved_database_url()


def _render_item(type_: str, obj: Any, autogen_context: Any) -> str | Literal[False]:
    """Render the project's UTC datetime as a plain timezone-aware DateTime."""
    if type_ == "type" and isinstance(obj, UtcDateTime):
        return "sa.DateTime(timezone=True)"
    return False


MIGRATION_LOCK = 7_243_001  # pg advisory lock key: one migrator at a time


def _run(connection: Any) -> None:
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            # Services that start together each run `provely db upgrade`: the first migrates,
            # the others wait here, then find the database at head.
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        context.run_migrations()


def _configure(connection: Any) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        render_item=_render_item,
        compare_type=True,
    )


def run_migrations_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_item=_render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        _run(connection)
        return
    engine: Engine = make_engine(_url())
    try:
        with engine.connect() as conn:
            _configure(conn)
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
