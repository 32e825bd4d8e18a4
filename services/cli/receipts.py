"""CLI: ``provely receipts`` — check a receipt offline, show one, list and rotate signing keys.

``verify`` exits 0 when the receipt is valid, 1 when it was tampered with (the signature does not
match), 2 when it cannot be checked (unknown key, malformed file, key list unavailable); each
answer is one line, or one JSON object with ``--json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

if TYPE_CHECKING:
    from shared.lifecycle.receipt_check import VerificationResult
    from shared.lifecycle.receipt_keyring import KeyRing

__all__ = ["register"]

group = typer.Typer(
    help="Signed receipts: check them offline, show them, list and rotate the signing keys.",
    no_args_is_help=True,
)

UNCHECKABLE = 2


class _CannotCheck(Exception):
    """The key list cannot be had: the check answers 2."""


def _fail(message: str, code: int = UNCHECKABLE) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(code)


def _keys_from_url(url: str) -> bytes:
    import httpx

    try:
        response = httpx.get(url, timeout=10.0, follow_redirects=True)
    except httpx.HTTPError as exc:
        raise _CannotCheck(f"cannot fetch the key list from {url}: {exc}") from exc
    if response.status_code != 200:
        raise _CannotCheck(f"cannot fetch the key list from {url}: HTTP {response.status_code}")
    return response.content


def _keys_from_database() -> KeyRing:
    from sqlalchemy.exc import SQLAlchemyError

    from services.cli.system import NoSystemError, existing_database_url
    from shared.db.session import make_engine, session_scope
    from shared.lifecycle.receipt_keyring import keyring_from_rows
    from shared.lifecycle.receipt_keys import list_receipt_keys

    try:
        url = existing_database_url()
    except NoSystemError as exc:
        raise _CannotCheck(f"{exc}; or pass --keys FILE|URL") from None
    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            return keyring_from_rows(list_receipt_keys(session))
    except SQLAlchemyError as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise _CannotCheck(
            f"cannot read receipt keys from the local database ({reason}); pass --keys"
        ) from exc
    finally:
        engine.dispose()


def _load_keyring(source: str | None) -> KeyRing:
    from shared.lifecycle.receipt_keyring import KeyRing, KeyRingError

    if source is None:
        return _keys_from_database()
    if source.startswith(("http://", "https://")):
        data = _keys_from_url(source)
    else:
        try:
            data = Path(source).read_bytes()
        except OSError as exc:
            raise _CannotCheck(f"cannot read key list {source}: {exc.strerror}") from exc
    try:
        return KeyRing.from_document(data)
    except KeyRingError as exc:
        raise _CannotCheck(f"unreadable key list {source}: {exc}") from exc


def _read_receipt(file: str) -> bytes:
    if file == "-":
        return sys.stdin.buffer.read()
    return Path(file).read_bytes()


def _report(result: VerificationResult, as_json: bool) -> NoReturn:
    if as_json:
        typer.echo(json.dumps(result.as_json(), sort_keys=True))
    else:
        typer.echo(result.reason, err=result.status != 0)
    raise typer.Exit(int(result.status))


@group.command("verify")
def verify(
    file: str = typer.Argument(..., help="Receipt document (JSON); '-' reads standard input."),
    keys: str | None = typer.Option(
        None,
        "--keys",
        help="Key list: a file or an http(s) URL serving GET /v1/receipts/keys. "
        "Default: the keys in the local database.",
    ),
    as_json: bool = typer.Option(False, "--json", help="One JSON object for machines."),
) -> None:
    """Check a receipt's signature offline: exit 0 valid, 1 tampered, 2 cannot check."""
    from shared.core.receipt import MalformedReceipt, parse_receipt_document
    from shared.lifecycle.receipt_check import (
        Verification,
        VerificationResult,
        verify_receipt_document,
    )

    try:
        data = _read_receipt(file)
    except OSError as exc:
        _report(
            VerificationResult(
                Verification.UNCHECKABLE, f"cannot read receipt {file}: {exc.strerror}"
            ),
            as_json,
        )
    try:
        parse_receipt_document(data)
    except MalformedReceipt as exc:  # say so before looking for keys
        _report(VerificationResult(Verification.UNCHECKABLE, f"malformed receipt: {exc}"), as_json)
    try:
        keyring = _load_keyring(keys)
    except _CannotCheck as exc:
        _report(VerificationResult(Verification.UNCHECKABLE, str(exc)), as_json)
    _report(verify_receipt_document(data, keyring), as_json)


def _database_session() -> Any:
    from services.cli.system import exit_when_no_system
    from shared.db.session import get_engine, session_scope

    return session_scope(get_engine(exit_when_no_system()))


@group.command("show")
def show(
    operation_id: str = typer.Argument(..., help="The operation (op_…)."),
    history: bool = typer.Option(
        False, "--all", help="Every receipt of the operation, superseded ones too (a JSON list)."
    ),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write to this file."),
) -> None:
    """Print an operation's current receipt document (the file `verify` checks)."""
    from sqlalchemy import select
    from sqlalchemy.exc import SQLAlchemyError

    from shared.core.receipt import document_bytes
    from shared.db.models import Receipt
    from shared.lifecycle.receipts import current_receipt, receipt_document_for

    try:
        with _database_session() as session:
            if history:
                rows = session.execute(
                    select(Receipt)
                    .where(Receipt.operation_id == operation_id)
                    .order_by(Receipt.created_at)
                ).scalars()
                documents: Any = [receipt_document_for(row) for row in rows]
                if not documents:
                    raise _fail(f"operation {operation_id} has no receipt", 1)
            else:
                row = current_receipt(session, operation_id)
                if row is None:
                    raise _fail(
                        f"operation {operation_id} has no receipt (unknown, or still open)", 1
                    )
                documents = receipt_document_for(row)
    except SQLAlchemyError as exc:
        raise _fail(f"cannot read the database: {str(exc).splitlines()[0]}") from exc
    data = document_bytes(documents)
    if output is None:
        sys.stdout.write(data.decode("utf-8"))
    else:
        output.write_bytes(data)
        typer.echo(f"wrote {output}", err=True)


@group.command("keys")
def keys_command() -> None:
    """Print the public key list (the JSON of GET /v1/receipts/keys), for offline checks."""
    from sqlalchemy.exc import SQLAlchemyError

    from shared.lifecycle.receipt_keyring import keys_document
    from shared.lifecycle.receipt_keys import list_receipt_keys

    try:
        with _database_session() as session:
            document = keys_document(list_receipt_keys(session))
    except SQLAlchemyError as exc:
        raise _fail(f"cannot read the database: {str(exc).splitlines()[0]}") from exc
    typer.echo(json.dumps(document, indent=2, sort_keys=True))


@group.command("rotate-key")
def rotate_key() -> None:
    """Generate a new signing key and retire the active one (its public key stays listed)."""
    from datetime import UTC, datetime

    from sqlalchemy.exc import SQLAlchemyError

    from shared.lifecycle.receipt_keyring import ReceiptKeyError
    from shared.lifecycle.receipt_keys import rotate_receipt_key

    try:
        with _database_session() as session:
            new, old = rotate_receipt_key(session, now=datetime.now(UTC))
            new_id, old_id = new.key_id, old.key_id if old is not None else None
    except ReceiptKeyError as exc:
        raise _fail(str(exc), 1) from exc
    except SQLAlchemyError as exc:
        raise _fail(f"cannot write the database: {str(exc).splitlines()[0]}", 2) from exc
    if old_id is None:
        typer.echo(f"active receipt key {new_id} (there was none before)")
    else:
        typer.echo(f"active receipt key {new_id}; retired {old_id} (it still verifies)")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(group, name="receipts")
