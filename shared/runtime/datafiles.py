"""The files of the embedded default are its owner's only.

The data directory (``PROVELY_DATA_DIR``) holds the SQLite database (connection secrets,
encrypted; operations and what agents sent), the broker's SQLite file, the generated Fernet key
that opens those secrets and the generated receipt signing key. Provely creates the directory
``0700`` and each file ``0600`` (SQLite gives its ``-wal`` and ``-shm`` files the database's
mode). Files and directories that already exist are left as their owner set them.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DIR_MODE", "FILE_MODE", "private_dir", "private_file", "sqlite_file_of"]

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) readable by its owner only; keep an existing one."""
    if path.is_dir():
        return
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    os.chmod(path, DIR_MODE)  # mkdir's mode is masked by the umask; this one is meant


def private_file(path: Path) -> None:
    """Create an empty ``path`` with mode 0600 when it does not exist yet (its directory
    private too), so that whatever fills it later (SQLite) keeps the mode."""
    if path.exists():
        return
    private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:  # another process made it first
        return
    os.close(fd)


def sqlite_file_of(url: str) -> Path | None:
    """The file of a SQLite URL (``sqlite:///…``, ``sqla+sqlite:///…``), else ``None``."""
    scheme, sep, rest = url.partition(":///")
    if not sep or not scheme.split("+")[-1].startswith("sqlite"):
        return None
    database = rest.split("?", 1)[0]
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)
