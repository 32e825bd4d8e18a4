"""The system a command acts on: the database of the data directory it finds, never a new one.

Only ``provely up`` and ``provely db upgrade`` create a database. Every other command reads
(or changes) the one that exists: when the embedded SQLite file is missing it stops with exit 2
and a hint that names the real cause — no data directory was found from here — instead of
creating an empty database (a second system, whose keys the running API does not know).
"""

from __future__ import annotations

from pathlib import Path

import typer

from shared.runtime.datadir import DATA_DIR_NAME
from shared.runtime.datafiles import sqlite_file_of
from shared.runtime.settings import Settings, get_settings

__all__ = ["NoSystemError", "existing_database_url", "exit_when_no_system"]


class NoSystemError(Exception):
    """The embedded database a command needs does not exist; the message says where it looked."""


def _no_system(settings: Settings, database: Path) -> NoSystemError:
    try:
        here = str(Path.cwd())
    except OSError:
        here = "the current directory"
    return NoSystemError(
        f"no Provely system here: {database} does not exist (no {DATA_DIR_NAME}/ directory "
        f"was found from {here} upwards; data directory {settings.data_dir}). Run this command "
        "in or below the directory where `provely up` runs, or set PROVELY_DATA_DIR to its "
        f"data directory; `provely up` (or `provely db upgrade`) creates a new one."
    )


def existing_database_url(url: str | None = None, *, settings: Settings | None = None) -> str:
    """``url`` or the settings' database URL; :class:`NoSystemError` when it is an SQLite file
    that does not exist (it is not created)."""
    settings = settings or get_settings()
    target = url or settings.resolved_database_url()
    database = sqlite_file_of(target)
    if database is not None and not database.exists():
        raise _no_system(settings, database)
    return target


def exit_when_no_system(url: str | None = None) -> str:
    """:func:`existing_database_url`, or one line on stderr and exit 2."""
    try:
        return existing_database_url(url)
    except NoSystemError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
