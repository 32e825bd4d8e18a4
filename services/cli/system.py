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


def _here() -> str:
    try:
        return str(Path.cwd())
    except OSError:
        return "the current directory"


_ELSEWHERE = (
    "Run this command in or below the directory where `provely up` runs, or set "
    "PROVELY_DATA_DIR to its data directory"
)


def _why_missing(settings: Settings, database: Path, *, url_named: bool) -> tuple[str, str]:
    """What made the command look for ``database`` (the real cause), and what to do."""
    if url_named:
        return (
            f"the database URL (PROVELY_DATABASE_URL) names {database}, which does not exist",
            "Set PROVELY_DATABASE_URL to the running system's database, or unset it to use the "
            "data directory found from here",
        )
    if settings.data_dir_named:
        held = "does not exist" if not settings.data_dir.exists() else "holds no database"
        return (
            f"the data directory {settings.data_dir} (PROVELY_DATA_DIR) {held}: "
            f"{database} does not exist",
            "Set PROVELY_DATA_DIR to the data directory of the running system (`provely up` "
            "prints it), or unset it to find one from here",
        )
    if settings.data_dir.is_dir():
        return (
            f"{settings.data_dir}, the nearest {DATA_DIR_NAME}/ directory from {_here()}, holds "
            f"no database: {database} does not exist (`provely up` has not run there)",
            _ELSEWHERE,
        )
    return (
        f"{database} does not exist (no {DATA_DIR_NAME}/ directory was found from {_here()} "
        "upwards)",
        _ELSEWHERE,
    )


def _no_system(settings: Settings, database: Path, *, url_named: bool) -> NoSystemError:
    cause, advice = _why_missing(settings, database, url_named=url_named)
    return NoSystemError(
        f"no Provely system here: {cause}. {advice}; `provely up` (or `provely db upgrade`) "
        "creates a new one."
    )


def existing_database_url(url: str | None = None, *, settings: Settings | None = None) -> str:
    """``url`` or the settings' database URL; :class:`NoSystemError` when it is an SQLite file
    that does not exist (it is not created)."""
    settings = settings or get_settings()
    target = url or settings.resolved_database_url()
    database = sqlite_file_of(target)
    if database is not None and not database.exists():
        raise _no_system(settings, database, url_named=bool(url or settings.database_url))
    return target


def exit_when_no_system(url: str | None = None) -> str:
    """:func:`existing_database_url`, or one line on stderr and exit 2."""
    try:
        return existing_database_url(url)
    except NoSystemError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
