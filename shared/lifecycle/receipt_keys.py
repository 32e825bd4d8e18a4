"""Receipt signing keys: Ed25519 keys, their ids, rotation, and the public key ring.

One key is ``active`` and signs new receipts; rotation retires it and keeps its public half
forever, so every receipt it signed still verifies. The active key comes from the PEM file named
by ``PROVELY_RECEIPT_KEY_FILE`` when that is set (its private half never enters the database),
else it is generated on first use and stored in ``receipt_keys`` with its private half
encrypted by :mod:`shared.trust.secrets`.

A key id is the first 16 hex digits of sha256 over the raw 32-byte public key, so anyone holding
the public key can recompute it. Signatures are base64url without padding; public keys are
standard base64 of the raw key.

Errors::

    ReceiptKeyError           the signing key cannot be loaded, stored or used
    KeyRingError (ValueError) a published key list that cannot be read
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from shared.core.receipt import ALGORITHM, MalformedReceipt, iso_time, parse_json_strict

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from shared.db.models import ReceiptKey
    from shared.runtime.settings import Settings

__all__ = [
    "ACTIVE",
    "RETIRED",
    "KeyRing",
    "KeyRingError",
    "PublishedKey",
    "ReceiptKeyError",
    "SigningKey",
    "active_signing_key",
    "b64url_decode_strict",
    "b64url_encode",
    "decode_public_key",
    "ensure_active_key",
    "generate_private_key",
    "key_id_for",
    "keyring_from_rows",
    "keys_document",
    "list_receipt_keys",
    "load_private_key_file",
    "public_key_b64",
    "rotate_receipt_key",
    "sign_payload",
    "verify_payload",
    "write_private_key_file",
]

ACTIVE = "active"
RETIRED = "retired"
SIGNATURE_BYTES = 64
PUBLIC_KEY_BYTES = 32


class ReceiptKeyError(Exception):
    """The receipt signing key cannot be loaded, stored or used."""


class KeyRingError(ValueError):
    """A key list (the JSON of ``GET /v1/receipts/keys``) that cannot be read."""


# ---------------------------------------------------------------------------------------------
# Pure crypto helpers


def _raw_public(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id_for(public: Ed25519PublicKey) -> str:
    """First 16 hex digits of sha256 over the raw public key."""
    return hashlib.sha256(_raw_public(public)).hexdigest()[:16]


def public_key_b64(public: Ed25519PublicKey) -> str:
    return base64.b64encode(_raw_public(public)).decode("ascii")


def generate_private_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode_strict(text: str) -> bytes | None:
    """Decode unpadded (or padded) base64url; None unless ``text`` is the one canonical spelling.

    Re-encoding must give back the same text, so the unused low bits of the last character
    cannot be flipped without the check noticing.
    """
    stripped = text.rstrip("=")
    try:
        raw = base64.urlsafe_b64decode(stripped + "=" * (-len(stripped) % 4))
    except (binascii.Error, ValueError):
        return None
    if b64url_encode(raw) != stripped:
        return None
    return raw


def decode_public_key(text: str) -> Ed25519PublicKey:
    """A public key from base64 (standard or url-safe alphabet) of its raw 32 bytes."""
    try:
        normalised = text.strip().replace("-", "+").replace("_", "/")
        raw = base64.b64decode(normalised + "=" * (-len(normalised) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise KeyRingError("public key is not base64") from exc
    if len(raw) != PUBLIC_KEY_BYTES:
        raise KeyRingError(f"public key has {len(raw)} bytes, an Ed25519 key has 32")
    return Ed25519PublicKey.from_public_bytes(raw)


def sign_payload(private: Ed25519PrivateKey, payload: bytes) -> str:
    """The base64url (unpadded) Ed25519 signature of ``payload``."""
    return b64url_encode(private.sign(payload))


def verify_payload(public: Ed25519PublicKey, payload: bytes, signature: str) -> bool:
    """True when ``signature`` (canonical base64url) is ``public``'s signature of ``payload``."""
    raw = b64url_decode_strict(signature)
    if raw is None or len(raw) != SIGNATURE_BYTES:
        return False
    try:
        public.verify(raw, payload)
    except InvalidSignature:
        return False
    return True


def load_private_key_file(path: Path) -> Ed25519PrivateKey:
    """An unencrypted PEM (PKCS#8) Ed25519 private key; ReceiptKeyError with the reason."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ReceiptKeyError(f"cannot read receipt key file {path}: {exc.strerror}") from exc
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise ReceiptKeyError(
            f"receipt key file {path} is not an unencrypted PEM private key"
        ) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise ReceiptKeyError(f"receipt key file {path} holds a non-Ed25519 key")
    return key


def write_private_key_file(path: Path, private: Ed25519PrivateKey) -> None:
    """Write ``private`` as PEM PKCS#8, readable by its owner only; refuses to overwrite."""
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with path.open("xb") as handle:
        path.chmod(0o600)
        handle.write(pem)


# ---------------------------------------------------------------------------------------------
# The public key ring (what a verifier needs)


@dataclass(frozen=True, slots=True)
class PublishedKey:
    key_id: str
    public_key: Ed25519PublicKey
    status: str
    created_at: str | None = None
    retired_at: str | None = None


@dataclass(frozen=True, slots=True)
class KeyRing:
    """Public keys by key id, as published by ``GET /v1/receipts/keys``."""

    keys: Mapping[str, PublishedKey]

    def get(self, key_id: str) -> PublishedKey | None:
        return self.keys.get(key_id)

    @classmethod
    def from_document(cls, data: bytes | str | Mapping[str, Any]) -> KeyRing:
        """Read a key list; every key's id must match its public key."""
        if isinstance(data, bytes | str):
            try:
                data = parse_json_strict(data)
            except MalformedReceipt as exc:
                raise KeyRingError(f"key list: {exc}") from exc
        if not isinstance(data, Mapping) or not isinstance(data.get("keys"), list):
            raise KeyRingError('key list is not an object with a "keys" list')
        found: dict[str, PublishedKey] = {}
        for entry in data["keys"]:
            if not isinstance(entry, Mapping):
                raise KeyRingError("key list entry is not an object")
            key_id, text, status = entry.get("key_id"), entry.get("public_key"), entry.get("status")
            if not isinstance(key_id, str) or not isinstance(text, str):
                raise KeyRingError("key list entry without key_id or public_key")
            if entry.get("alg", ALGORITHM) != ALGORITHM:
                continue  # a key for another algorithm signs nothing we check
            public = decode_public_key(text)
            if key_id_for(public) != key_id:
                raise KeyRingError(f"key {key_id} does not match its public key")
            found[key_id] = PublishedKey(
                key_id=key_id,
                public_key=public,
                status=status if isinstance(status, str) else "unknown",
                created_at=_opt_str(entry.get("created_at")),
                retired_at=_opt_str(entry.get("retired_at")),
            )
        return cls(keys=found)


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def keys_document(rows: Iterable[ReceiptKey]) -> dict[str, Any]:
    """The public key list: active key first, then retired ones, newest first."""
    ordered = sorted(rows, key=lambda r: (r.status != ACTIVE, -r.created_at.timestamp()))
    return {
        "keys": [
            {
                "key_id": row.key_id,
                "alg": ALGORITHM,
                "public_key": row.public_key,
                "status": row.status,
                "created_at": iso_time(row.created_at),
                "retired_at": iso_time(row.retired_at) if row.retired_at else None,
            }
            for row in ordered
        ]
    }


def keyring_from_rows(rows: Iterable[ReceiptKey]) -> KeyRing:
    return KeyRing.from_document(keys_document(rows))


# ---------------------------------------------------------------------------------------------
# Keys in the record


@dataclass(frozen=True, slots=True)
class SigningKey:
    key_id: str
    private_key: Ed25519PrivateKey


_cache: dict[str, Ed25519PrivateKey] = {}
_cache_lock = threading.Lock()


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
