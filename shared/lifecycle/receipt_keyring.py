"""Ed25519 receipt keys without the record: key ids, signatures, key files and the key ring.

A key id is the first 16 hex digits of sha256 over the raw 32-byte public key, so anyone holding
the public key can recompute it. Signatures are base64url without padding; public keys are
standard base64 of the raw key. :class:`KeyRing` is what a verifier needs: the published key
list (``GET /v1/receipts/keys``), read strictly. The keys kept in the record, and their
rotation, are ``shared.lifecycle.receipt_keys``.

Errors::

    ReceiptKeyError           a key file that cannot be loaded or written
    KeyRingError (ValueError) a published key list that cannot be read
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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
    from shared.db.models import ReceiptKey

__all__ = [
    "ACTIVE",
    "PUBLIC_KEY_BYTES",
    "RETIRED",
    "SIGNATURE_BYTES",
    "KeyRing",
    "KeyRingError",
    "PublishedKey",
    "ReceiptKeyError",
    "b64url_decode_strict",
    "b64url_encode",
    "decode_public_key",
    "generate_private_key",
    "key_id_for",
    "keyring_from_rows",
    "keys_document",
    "load_private_key_file",
    "public_key_b64",
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
