"""CLI: ``provely db upgrade`` and ``provely db current`` (the Alembic migrations)."""

from __future__ import annotations

import typer

__all__ = ["register"]

group = typer.Typer(help="Database schema: migrations.", no_args_is_help=True)


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


@group.command("upgrade")
def upgrade(
    url: str | None = typer.Option(
        None, "--url", help="SQLAlchemy URL (default: PROVELY_DATABASE_URL or the embedded SQLite)."
    ),
    revision: str = typer.Option("head", "--revision", help="Target revision."),
) -> None:
    """Create or bring the database schema up to date."""
    from sqlalchemy.exc import SQLAlchemyError

    from shared.db.migrate import upgrade as run_upgrade
    from shared.runtime.settings import get_settings

    target = url or get_settings().resolved_database_url()
    try:
        run_upgrade(target, revision)
    except SQLAlchemyError as exc:
        typer.echo(
            f"error: cannot migrate {_redact(target)}: {exc.__class__.__name__}: "
            f"{str(exc).splitlines()[0]}",
            err=True,
        )
        raise typer.Exit(2) from None
    typer.echo(f"database at revision {revision}: {_redact(target)}")


@group.command("current")
def current(
    url: str | None = typer.Option(None, "--url", help="SQLAlchemy URL."),
) -> None:
    """Print the database's current revision (exit 1 when it is behind the code's head).

    It only reads: a database that does not exist is exit 2, never created."""
    from sqlalchemy.exc import SQLAlchemyError

    from services.cli.system import exit_when_no_system
    from shared.db.migrate import current_revision, head_revision

    target = exit_when_no_system(url)
    try:
        rev = current_revision(target)
    except SQLAlchemyError as exc:
        typer.echo(f"error: cannot read {_redact(target)}: {str(exc).splitlines()[0]}", err=True)
        raise typer.Exit(2) from None
    head = head_revision()
    typer.echo(f"current: {rev or 'none'}  head: {head}")
    if rev != head:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the ``db`` group to the root app."""
    app.add_typer(group, name="db")
