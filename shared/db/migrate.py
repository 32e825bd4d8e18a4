"""Run and regenerate the Alembic migrations in ``shared/db/migrations``.

There is one revision, ``0001_initial``, kept in sync with :mod:`shared.db.models`. After a model
edit, regenerate it with ``python -m shared.db.migrate regenerate`` (autogenerate against an
empty SQLite database, then ``ruff format``), and review the diff.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

__all__ = [
    "MIGRATIONS_DIR",
    "alembic_config",
    "current_revision",
    "head_revision",
    "regenerate",
    "upgrade",
]

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
INITIAL = MIGRATIONS_DIR / "versions" / "0001_initial.py"


def alembic_config(url: str | None = None) -> Config:
    """An Alembic config pointing at the project's migrations (no ini file needed)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url:
        # ConfigParser interpolates '%'; escape it so URL-encoded passwords survive.
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str | None = None, revision: str = "head") -> None:
    """Bring the database at ``url`` (default: the settings') to ``revision``."""
    command.upgrade(alembic_config(url), revision)


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(url: str | None = None) -> str | None:
    """The revision the database at ``url`` is at (None when it was never migrated)."""
    from shared.db.session import make_engine
    from shared.runtime.settings import get_settings

    engine = make_engine(url or get_settings().resolved_database_url())
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def regenerate() -> Path:
    """Rewrite ``0001_initial`` from the models (autogenerate against an empty database)."""
    INITIAL.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        config = alembic_config(f"sqlite:///{Path(tmp) / 'empty.db'}")
        command.revision(config, message="initial", autogenerate=True, rev_id="0001")
    generated = MIGRATIONS_DIR / "versions" / "0001_initial.py"
    ruff = Path(sys.executable).parent / "ruff"
    subprocess.run([str(ruff), "format", str(generated)], check=True)
    subprocess.run([str(ruff), "check", "--fix", "--quiet", str(generated)], check=False)
    return generated


if __name__ == "__main__":
    if sys.argv[1:] == ["regenerate"]:
        print(regenerate())
    else:
        print("usage: python -m shared.db.migrate regenerate", file=sys.stderr)
        sys.exit(2)
