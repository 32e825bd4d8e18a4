"""Which data directory a process uses when ``PROVELY_DATA_DIR`` is not set: found the way git
finds its repository.

One system lives in one data directory (``.provely/``: its SQLite database, broker, keys). A
command run anywhere below the directory where ``provely up`` runs must act on that system, not
make a second, empty one in the current directory. So the default is the nearest ``.provely/``
directory in the current directory or one of its parents; only when there is none is it
``.provely`` in the current directory (where ``provely up`` or ``provely db upgrade`` will
create it). ``PROVELY_DATA_DIR`` (or ``--data-dir``) always wins.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DATA_DIR_NAME", "default_data_dir", "find_data_dir"]

DATA_DIR_NAME = ".provely"


def find_data_dir(start: Path) -> Path | None:
    """The nearest ``.provely/`` directory in ``start`` or one of its parents, else ``None``."""
    for directory in (start, *start.parents):
        candidate = directory / DATA_DIR_NAME
        if candidate.is_dir():
            return candidate
    return None


def default_data_dir() -> Path:
    """The data directory of a process without ``PROVELY_DATA_DIR``: the nearest ``.provely/``
    from the current directory upwards, else ``.provely`` in the current directory."""
    try:
        here = Path.cwd()
    except OSError:  # the current directory was removed
        return Path(DATA_DIR_NAME)
    found = find_data_dir(here)
    return found if found is not None else Path(DATA_DIR_NAME)
