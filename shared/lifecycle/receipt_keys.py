"""Receipt signing keys in the record: the active key, its storage and its rotation.

One key is ``active`` and signs new receipts; rotation retires it and keeps its public half
forever, so every receipt it signed still verifies. The active key comes from the PEM file named
by ``PROVELY_RECEIPT_KEY_FILE`` when that is set (its private half never enters the database),
else it is generated on first use and stored in ``receipt_keys`` with its private half
encrypted by :mod:`shared.trust.secrets`.

Key ids, signatures, key files and the public key ring are ``shared.lifecycle.receipt_keyring``;
its ``ReceiptKeyError`` is also what this module raises when the signing key cannot be loaded,
stored or used.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
)

from shared.lifecycle.receipt_keyring import (
    ACTIVE,
    RETIRED,
    ReceiptKeyError,
    generate_private_key,
    key_id_for,
    load_private_key_file,
    public_key_b64,
)

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from shared.db.models import ReceiptKey
    from shared.runtime.settings import Settings

__all__ = [
    "SigningKey",
    "active_signing_key",
    "ensure_active_key",
    "last_signing_key",
    "list_receipt_keys",
    "rotate_receipt_key",
]


@dataclass(frozen=True, slots=True)
class SigningKey:
    key_id: str
    private_key: Ed25519PrivateKey


_cache: dict[str, Ed25519PrivateKey] = {}
_cache_lock = threading.Lock()
_last: dict[Path | None, SigningKey] = {}
"""The key :func:`active_signing_key` last returned, per key file setting (None: stored keys)."""


def _settings(settings: Settings | None) -> Settings:
    if settings is not None:
        return settings
    from shared.runtime.settings import get_settings

    return get_settings()


def _lock_keys(session: Session) -> None:
    """Serialise key creation and rotation (PostgreSQL advisory lock; SQLite serialises writers)."""
    from sqlalchemy import text

    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(hashtext('provely.receipt_keys'))"))


def list_receipt_keys(session: Session) -> list[ReceiptKey]:
    from sqlalchemy import select

    from shared.db.models import ReceiptKey

    return list(session.execute(select(ReceiptKey)).scalars())


_ACTIVE_ID: Any = None


def active_key_columns() -> Any:
    """A statement for the active key: ``key_id`` and ``has_private`` (its private half is
    stored); no row when there is none. Callers may read it as a subquery with other reads."""
    from sqlalchemy import select

    from shared.db.models import ReceiptKey

    table = ReceiptKey.__table__
    return (
        select(table.c.key_id, table.c.private_key_enc.is_not(None).label("has_private"))
        .where(table.c.status == ACTIVE)
        .order_by(table.c.created_at.desc())
        .limit(1)
    )


def _active_id_statement() -> Any:
    """Built once (see :func:`active_key_columns`)."""
    global _ACTIVE_ID
    if _ACTIVE_ID is None:
        _ACTIVE_ID = active_key_columns()
    return _ACTIVE_ID


def _active_row(session: Session) -> ReceiptKey | None:
    from sqlalchemy import select

    from shared.db.models import ReceiptKey

    rows = list(
        session.execute(
            select(ReceiptKey)
            .where(ReceiptKey.status == ACTIVE)
            .order_by(ReceiptKey.created_at.desc())
        ).scalars()
    )
    return rows[0] if rows else None


def _encrypt(private: Ed25519PrivateKey, settings: Settings) -> bytes:
    from shared.trust.secrets import SecretError, encrypt

    raw = private.private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )
    try:
        return encrypt(raw, settings=settings)
    except SecretError as exc:
        raise ReceiptKeyError(f"cannot store a new receipt signing key: {exc}") from exc


def _decrypt(row: ReceiptKey, settings: Settings) -> Ed25519PrivateKey:
    from shared.trust.secrets import decrypt

    assert row.private_key_enc is not None
    try:
        raw = decrypt(row.private_key_enc, settings=settings)
        private = Ed25519PrivateKey.from_private_bytes(raw)
    except Exception as exc:
        raise ReceiptKeyError(
            f"cannot decrypt receipt key {row.key_id}: is PROVELY_SECRET_KEY the one it was "
            "stored with?"
        ) from exc
    if key_id_for(private.public_key()) != row.key_id:
        raise ReceiptKeyError(f"receipt key {row.key_id} does not match its stored private key")
    return private


def _insert(
    session: Session,
    private: Ed25519PrivateKey,
    *,
    store_private: bool,
    now: datetime,
    settings: Settings,
) -> ReceiptKey:
    from shared.db.models import ReceiptKey

    public = private.public_key()
    row = ReceiptKey(
        key_id=key_id_for(public),
        public_key=public_key_b64(public),
        private_key_enc=_encrypt(private, settings) if store_private else None,
        status=ACTIVE,
        created_at=now,
        retired_at=None,
    )
    session.add(row)
    session.flush()
    with _cache_lock:
        _cache[row.key_id] = private
    return row


def _retire(row: ReceiptKey, *, now: datetime) -> None:
    """Retire a key: its public half stays published, its private half is erased."""
    row.status = RETIRED
    row.retired_at = now
    row.private_key_enc = None
    with _cache_lock:
        _cache.pop(row.key_id, None)
        for source, key in list(_last.items()):
            if key.key_id == row.key_id:
                del _last[source]


def _from_file(session: Session, path: Path, *, now: datetime, settings: Settings) -> SigningKey:
    from shared.db.models import ReceiptKey

    private = load_private_key_file(path)
    key_id = key_id_for(private.public_key())
    row = session.get(ReceiptKey, key_id)
    if row is not None and row.status == ACTIVE:
        return SigningKey(key_id, private)
    _lock_keys(session)
    row = session.get(ReceiptKey, key_id, populate_existing=True)
    if row is not None and row.status == RETIRED:
        raise ReceiptKeyError(
            f"the receipt key in {path} ({key_id}) was retired; a retired key never signs again"
        )
    if row is None:
        current = _active_row(session)
        if current is not None:
            _retire(current, now=now)  # the configured file replaced it: that is a rotation
            session.flush()
        _insert(session, private, store_private=False, now=now, settings=settings)
    return SigningKey(key_id, private)


_UNREAD: Any = object()


def active_signing_key(
    session: Session,
    *,
    now: datetime,
    settings: Settings | None = None,
    active: tuple[str, bool] | None = _UNREAD,
) -> SigningKey:
    """The key that signs receipts now; created (or registered from the file) on first use.

    Runs in the caller's transaction. Raises ReceiptKeyError with a one-line reason when the
    key cannot be loaded. ``active``: the active key's id and whether its private half is
    stored (None: no active key), when the caller read them already in this transaction with
    :func:`active_key_columns`.
    """
    settings = _settings(settings)
    key = _signing_key(session, now=now, settings=settings, active=active)
    with _cache_lock:
        _last[settings.receipt_key_file] = key
    return key


def last_signing_key(settings: Settings | None = None) -> SigningKey | None:
    """The stored key :func:`active_signing_key` last returned in this process, without a read;
    None before the first, and always None with ``PROVELY_RECEIPT_KEY_FILE`` set (the file is
    read for each receipt, so that a replaced file signs the next one).

    Another process may have retired it since (a rotation). Sign with it only where the
    statement that stores the signature also checks that the key is still active, and ask
    :func:`active_signing_key` again when it is not."""
    source = _settings(settings).receipt_key_file
    if source is not None:
        return None  # the file is read for every receipt: a file replaced is a rotation
    with _cache_lock:
        return _last.get(source)


def _signing_key(
    session: Session, *, now: datetime, settings: Settings, active: tuple[str, bool] | None
) -> SigningKey:
    if settings.receipt_key_file is not None:
        return _from_file(session, settings.receipt_key_file, now=now, settings=settings)
    if active is _UNREAD:
        row_found = session.execute(_active_id_statement()).first()
        active = None if row_found is None else (row_found.key_id, bool(row_found.has_private))
    if active is not None:
        # The usual case: the active key is stored and this process has decrypted it before.
        key_id, has_private = active
        with _cache_lock:
            cached = _cache.get(key_id)
        if cached is not None and has_private:
            return SigningKey(key_id, cached)
    row = _active_row(session)
    if row is None:
        _lock_keys(session)
        row = _active_row(session)
        if row is None:
            row = _insert(
                session, generate_private_key(), store_private=True, now=now, settings=settings
            )
    if row.private_key_enc is None:
        raise ReceiptKeyError(
            f"the active receipt key {row.key_id} lives in a key file; set "
            "PROVELY_RECEIPT_KEY_FILE in this process too"
        )
    with _cache_lock:
        private = _cache.get(row.key_id)
    if private is None:
        private = _decrypt(row, settings)
        with _cache_lock:
            _cache[row.key_id] = private
    return SigningKey(row.key_id, private)


def ensure_active_key(
    session: Session, *, now: datetime, settings: Settings | None = None
) -> ReceiptKey:
    """Make sure a key is published as active (first start), without needing its private half.

    With ``PROVELY_RECEIPT_KEY_FILE`` set, the file's key is registered (as signing would);
    otherwise an existing active key is kept, and one is generated when there is none. A
    process that only publishes keys (the API) never needs the key file.
    """
    from shared.db.models import ReceiptKey

    settings = _settings(settings)
    if settings.receipt_key_file is not None:
        key = _from_file(session, settings.receipt_key_file, now=now, settings=settings)
        row = session.get(ReceiptKey, key.key_id)
        assert row is not None
        return row
    row = _active_row(session)
    if row is None:
        _lock_keys(session)
        row = _active_row(session)
        if row is None:
            row = _insert(
                session, generate_private_key(), store_private=True, now=now, settings=settings
            )
    return row


def rotate_receipt_key(
    session: Session, *, now: datetime, settings: Settings | None = None
) -> tuple[ReceiptKey, ReceiptKey | None]:
    """Generate a new active key and retire the current one; returns (new, retired)."""
    settings = _settings(settings)
    if settings.receipt_key_file is not None:
        raise ReceiptKeyError(
            "receipts are signed with the key in PROVELY_RECEIPT_KEY_FILE; to rotate, point it "
            "at a new key file (the old key is retired on the next start)"
        )
    _lock_keys(session)
    current = _active_row(session)
    if current is not None:
        _retire(current, now=now)
        session.flush()
    new = _insert(session, generate_private_key(), store_private=True, now=now, settings=settings)
    return new, current
