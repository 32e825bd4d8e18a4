"""Checking a receipt offline: :func:`verify_receipt` against a :class:`KeyRing`.

A receipt document is ``{"receipt": body, "signature": <base64url>, "key_id": …, "alg":
"Ed25519"}``; the signature covers the canonical bytes of ``body`` named by its ``version``
(1 or 2, see ``_canonical``). The keys are the JSON of ``GET /v1/receipts/keys``: the active
key and every retired one (a retired key still verifies what it signed). Nothing here touches
the network; the clients fetch the keys once and keep them.

The order of the checks decides the answer: the document must parse and name a known key with
a version this SDK reads before the signature can say anything (``uncheckable``); then the
signature decides (``valid`` or ``tampered``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from provely_sdk._canonical import NotCanonical, signed_bytes
from provely_sdk._ed25519 import verify
from provely_sdk._errors import ReceiptError

__all__ = ["KeyRing", "ReceiptCheck", "ReceiptKey", "parse_strict", "verify_receipt"]

ALGORITHM = "Ed25519"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON data")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"duplicate key {key!r}")
        found[key] = value
    return found


def parse_strict(data: str | bytes) -> Any:
    """JSON that two parsers cannot read differently: no duplicate keys, no NaN/Infinity."""
    try:
        return json.loads(data, object_pairs_hook=_unique_keys, parse_constant=_refuse_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReceiptError(f"not readable JSON: {exc}") from exc


@dataclass(frozen=True, slots=True)
class ReceiptKey:
    key_id: str
    public_key: bytes
    status: str
    retired_at: str | None


@dataclass(frozen=True, slots=True)
class KeyRing:
    """The receipt keys of one Provely, by key id."""

    keys: Mapping[str, ReceiptKey]

    @classmethod
    def from_document(cls, document: dict[str, Any] | str | bytes) -> KeyRing:
        """Read the JSON of ``GET /v1/receipts/keys``; a key whose id is not the first 16 hex
        digits of sha256 over its raw public key is refused (:class:`ReceiptError`)."""
        data = parse_strict(document) if isinstance(document, str | bytes) else document
        entries = data.get("keys") if isinstance(data, Mapping) else None
        if not isinstance(entries, list):
            raise ReceiptError("the key list has no 'keys' array")
        keys: dict[str, ReceiptKey] = {}
        for entry in entries:
            if not isinstance(entry, Mapping) or entry.get("alg") != ALGORITHM:
                continue
            try:
                raw = base64.b64decode(str(entry["public_key"]), validate=True)
            except (KeyError, binascii.Error) as exc:
                raise ReceiptError(f"a key of the list is not readable: {exc!r}") from exc
            key_id = str(entry.get("key_id"))
            if len(raw) != 32 or hashlib.sha256(raw).hexdigest()[:16] != key_id:
                raise ReceiptError(f"key {key_id} does not match its public key")
            retired = entry.get("retired_at")
            keys[key_id] = ReceiptKey(
                key_id, raw, str(entry.get("status")), retired if isinstance(retired, str) else None
            )
        return cls(keys)


@dataclass(frozen=True, slots=True)
class ReceiptCheck:
    """The answer of :func:`verify_receipt`."""

    status: Literal["valid", "tampered", "uncheckable"]
    reason: str
    receipt: Mapping[str, Any] | None = None
    key_id: str | None = None
    key_status: str | None = None
    unknown_key: bool = False

    @property
    def valid(self) -> bool:
        return self.status == "valid"


def _signature(text: Any) -> bytes | None:
    if not isinstance(text, str):
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    # Only the canonical spelling of the 64 bytes is accepted.
    if base64.urlsafe_b64encode(raw).decode().rstrip("=") != text:
        return None
    return raw


def verify_receipt(document: Mapping[str, Any] | str | bytes, keys: KeyRing) -> ReceiptCheck:
    """Check ``document`` against ``keys``: ``valid``, ``tampered`` or ``uncheckable``."""
    try:
        data = parse_strict(document) if isinstance(document, str | bytes) else document
    except ReceiptError as exc:
        return ReceiptCheck("uncheckable", f"malformed receipt: {exc}")
    body = data.get("receipt") if isinstance(data, Mapping) else None
    if not isinstance(body, Mapping):
        return ReceiptCheck("uncheckable", "malformed receipt: no 'receipt' object")
    if data.get("alg") != ALGORITHM:
        return ReceiptCheck("uncheckable", f"unsupported algorithm {data.get('alg')!r}")
    key = keys.keys.get(str(data.get("key_id")))
    if key is None:
        return ReceiptCheck("uncheckable", f"unknown key {data.get('key_id')}", unknown_key=True)
    signature = _signature(data.get("signature"))
    if signature is None:
        return ReceiptCheck("uncheckable", "malformed receipt: the signature is not base64url")
    try:
        payload = signed_bytes(dict(body))
    except NotCanonical as exc:
        return ReceiptCheck("uncheckable", f"cannot check: {exc}", key_id=key.key_id)
    if not verify(key.public_key, payload, signature):
        return ReceiptCheck(
            "tampered",
            f"tampered: the signature does not match the receipt under key {key.key_id}",
            body,
            key.key_id,
            key.status,
        )
    return ReceiptCheck(
        "valid",
        f"valid: receipt {body.get('id')} of {body.get('operation_id')} ({body.get('verdict')}) "
        f"signed by key {key.key_id} ({key.status})",
        body,
        key.key_id,
        key.status,
    )
