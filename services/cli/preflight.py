"""What a long-running command checks before it starts anything: one line for the first
problem, so that ``provely up`` and ``provely sandbox stripe`` exit 2 at once instead of
starting workers that die on the same problem.

- :func:`port_problem` — the address cannot be listened on (taken, not ours);
- :func:`data_dir_problem` — the data directory cannot be made or written;
- :func:`contracts_problem` — the contracts and skills do not load (tampered, untrusted,
  not linting), as ``provely contracts list`` would say it;
- :func:`database_problem` — ``PROVELY_DATABASE_URL`` is not a URL, or names a server that
  cannot be reached (the embedded SQLite file is made by the migrations);
- :func:`keys_problem` — ``PROVELY_SECRET_KEY`` is not a Fernet key, or
  ``PROVELY_RECEIPT_KEY_FILE`` cannot be read as an Ed25519 private key (found otherwise only
  when the first secret is stored or the first receipt signed).

The settings themselves are validated when they are read (``get_settings()``): a bad
``PROVELY_*`` value is a ``ValidationError`` that ``provely``'s entry point turns into one line
and exit 2.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from shared.runtime.datafiles import private_dir
from shared.runtime.settings import Settings

__all__ = [
    "contracts_problem",
    "data_dir_problem",
    "database_problem",
    "keys_problem",
    "port_problem",
]


def port_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on now, or ``None`` when it can."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
            probe.bind((host, port))
    except OSError as exc:
        return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    return None


def data_dir_problem(directory: Path) -> str | None:
    """Why the data directory cannot hold the embedded system's files, or ``None``.

    It creates the directory (``0700``, as the embedded system would) when it is missing."""
    try:
        private_dir(directory)
    except OSError as exc:
        return f"cannot use the data directory {directory}: {exc.strerror or exc}"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"cannot use the data directory {directory}: not writable"
    return None


def contracts_problem(settings: Settings) -> str | None:
    """The contracts and skills as the services would load them: the first problem (and how
    many more), or ``None`` when they all load."""
    # Imported here: the registry pulls YAML and the signature code, which `provely --help`
    # need not load.
    from shared.trust.registry import RegistryError, load_registry

    try:
        load_registry(settings=settings)
    except RegistryError as exc:
        first = exc.problems[0] if exc.problems else str(exc)
        more = len(exc.problems) - 1
        tail = f" (and {more} more; `provely contracts list` shows them all)" if more > 0 else ""
        return f"contracts cannot be loaded: {first}{tail}"
    return None


def keys_problem(settings: Settings) -> str | None:
    """Why the secret key or the receipt key file cannot be used, or ``None``. Without
    ``PROVELY_SECRET_KEY`` the embedded default makes its key in the data directory (which
    :func:`data_dir_problem` has checked first)."""
    from shared.lifecycle.receipt_keyring import ReceiptKeyError, load_private_key_file
    from shared.trust.secrets import SecretError, check_secret_key

    try:
        check_secret_key(settings)
    except SecretError as exc:
        return str(exc)
    except ValueError as exc:  # Fernet refuses a key that is not 32 url-safe base64 bytes
        return f"PROVELY_SECRET_KEY is not a Fernet key: {exc}"
    if settings.receipt_key_file is not None:
        try:
            load_private_key_file(settings.receipt_key_file)
        except ReceiptKeyError as exc:
            return f"PROVELY_RECEIPT_KEY_FILE: {exc}"
    return None


def database_problem(settings: Settings) -> str | None:
    """Why the configured database cannot be used, or ``None``. An SQLite file is not opened
    here (the migrations create it in the data directory, checked before); a server is
    connected to once."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from shared.db.session import make_engine

    url = settings.resolved_database_url()
    try:
        parsed = make_url(url)
    except ArgumentError:
        return "PROVELY_DATABASE_URL is not an SQLAlchemy URL"
    if parsed.get_backend_name() == "sqlite":
        return None
    shown = parsed.render_as_string(hide_password=True)
    try:
        engine = make_engine(url, pool_pre_ping=True)
    except (SQLAlchemyError, ImportError) as exc:
        return f"cannot use the database {shown}: {exc.__class__.__name__}"
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        first = (str(getattr(exc, "orig", None) or exc).splitlines() or ["?"])[0]
        return f"cannot reach the database {shown}: {first}"
    finally:
        engine.dispose()
    return None
