"""The SDK's offline receipt check, against the server's own signing code: receipts signed as
Provely signs them (v2 RFC 8785, v1 sorted ``json.dumps``) verify, any changed leaf or
signature byte is tampered, retired keys still verify, unknown keys and versions cannot be
checked; the SDK's JCS and Ed25519 agree with ``rfc8785`` and ``cryptography``."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from typing import Any

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given, settings
from hypothesis import strategies as st
from provely_sdk import KeyRing, ReceiptError, verify_receipt
from provely_sdk._canonical import jcs
from provely_sdk._ed25519 import verify

BODY: dict[str, Any] = {
    "version": 2,
    "id": "rcpt_0001",
    "operation_id": "op_0001",
    "workspace_id": "ws_0001",
    "contract": {
        "id": "stripe.refund.succeeded",
        "version": "1.1.0",
        "hash": "ab" * 32,
        "completion_level": "succeeded",
    },
    "verdict": "VERIFIED",
    "reason": "all_conditions_hold",
    "class": None,
    "safe_to_claim_complete": True,
    "decided_at": "2026-12-02T10:00:00.000000Z",
    "valid_as_of": "2026-12-02T10:00:00.000000Z",
    "subject": {"type": "stripe.refund", "key": "refund_id", "id": "re_1"},
    "correlation": [{"strategy": "idempotency_key", "assurance": "strong"}],
    "conditions": [
        {"id": "amount", "kind": "completion", "holds": True, "observed": 2000.0,
         "expected": 1e16},
        {"id": "n", "kind": "negative", "holds": None, "observed": "UNKNOWN", "expected": 0.5},
        {"id": "\U0001f600k", "kind": "x", "holds": False, "observed": "é\u2028", "expected": -0.0},
    ],
    "evidence": [{"channel": "refund", "level": "E2", "observed_at": "2026-12-02T10:00:00Z",
                  "provider_timestamp": None, "digest": "cd" * 32}],
    "supersedes": None,
}  # fmt: skip


def _key_entry(key: Ed25519PrivateKey, *, status: str = "active") -> dict[str, Any]:
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return {
        "key_id": hashlib.sha256(raw).hexdigest()[:16],
        "alg": "Ed25519",
        "public_key": base64.b64encode(raw).decode(),
        "status": status,
        "created_at": "2026-12-01T00:00:00Z",
        "retired_at": "2026-12-02T00:00:00Z" if status == "retired" else None,
    }


def _sign(body: dict[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    if body["version"] == 2:
        payload = rfc8785.dumps(body)
    else:
        payload = json.dumps(
            body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode()
    signature = base64.urlsafe_b64encode(key.sign(payload)).decode().rstrip("=")
    return {
        "receipt": body,
        "signature": signature,
        "key_id": _key_entry(key)["key_id"],
        "alg": "Ed25519",
    }


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))]
    return [path]


def _changed(value: Any) -> Any:
    match value:
        case bool():
            return not value
        case None:
            return 0
        case int():
            return value + 1
        case float():
            return value * 2 + 1  # 1e16 + 1 is 1e16 again
        case str():
            return value + "x"
    raise AssertionError(value)


@pytest.mark.parametrize("version", [1, 2])
def test_a_receipt_verifies_and_every_changed_leaf_is_tampered(version: int) -> None:
    key = Ed25519PrivateKey.generate()
    keys = KeyRing.from_document({"keys": [_key_entry(key)]})
    document = _sign({**copy.deepcopy(BODY), "version": version}, key)
    check = verify_receipt(document, keys)
    assert check.status == "valid", check.reason
    assert check.valid
    for path in _leaves(document["receipt"]):
        if path == ("version",):
            continue  # a version change is its own test below
        altered = copy.deepcopy(document)
        target = altered["receipt"]
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = _changed(target[path[-1]])
        assert verify_receipt(altered, keys).status == "tampered", path


def test_every_signature_byte_matters_and_the_text_form_too() -> None:
    key = Ed25519PrivateKey.generate()
    keys = KeyRing.from_document({"keys": [_key_entry(key)]})
    document = _sign(copy.deepcopy(BODY), key)
    raw = base64.urlsafe_b64decode(document["signature"] + "==")
    for index in range(64):
        broken = bytearray(raw)
        broken[index] ^= 0x01
        altered = {**document, "signature": base64.urlsafe_b64encode(bytes(broken)).decode()}
        altered["signature"] = altered["signature"].rstrip("=")
        assert verify_receipt(altered, keys).status == "tampered", index
    # The same document as text checks the same; padding is not the canonical spelling.
    assert verify_receipt(json.dumps(document), keys).valid
    padded = {**document, "signature": document["signature"] + "=="}
    assert verify_receipt(padded, keys).status == "uncheckable"


def test_relabelled_versions_retired_keys_and_unknown_keys() -> None:
    old, new = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    keys = KeyRing.from_document({"keys": [_key_entry(new), _key_entry(old, status="retired")]})
    signed_by_old = _sign(copy.deepcopy(BODY), old)
    check = verify_receipt(signed_by_old, keys)
    assert check.valid
    assert check.key_status == "retired"
    relabelled = copy.deepcopy(_sign({**copy.deepcopy(BODY), "version": 1}, new))
    relabelled["receipt"]["version"] = 2
    assert verify_receipt(relabelled, keys).status == "tampered"
    unknown_version = copy.deepcopy(signed_by_old)
    unknown_version["receipt"]["version"] = 3
    assert verify_receipt(unknown_version, keys).status == "uncheckable"
    stranger = _sign(copy.deepcopy(BODY), Ed25519PrivateKey.generate())
    check = verify_receipt(stranger, keys)
    assert check.status == "uncheckable"
    assert check.unknown_key


def test_duplicate_keys_and_nan_are_refused_and_a_lying_key_list_too() -> None:
    key = Ed25519PrivateKey.generate()
    keys = KeyRing.from_document({"keys": [_key_entry(key)]})
    text = json.dumps(_sign(copy.deepcopy(BODY), key))
    assert verify_receipt(text[:-1] + ', "alg": "Ed25519"}', keys).status == "uncheckable"
    assert verify_receipt(text.replace('"holds": null', '"holds": NaN'), keys).status == (
        "uncheckable"
    )
    lying = _key_entry(key)
    lying["key_id"] = "0" * 16
    with pytest.raises(ReceiptError, match="does not match"):
        KeyRing.from_document({"keys": [lying]})
    with pytest.raises(ReceiptError):
        KeyRing.from_document("[]")


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(_json)
def test_jcs_spells_what_rfc8785_spells(value: Any) -> None:
    try:
        expected = rfc8785.dumps(value)
    except rfc8785.CanonicalizationError:
        return  # lone surrogates: both refuse (checked in the receipts tests above)
    assert jcs(value) == expected


@pytest.mark.parametrize(
    "number", [0.1, 1e21, 1e-7, 123456789012345680000.0, 5e-324, 1.7976931348623157e308, -2.5e-6]
)
def test_jcs_numbers_at_the_edges(number: float) -> None:
    assert jcs(number) == rfc8785.dumps(number)


@settings(max_examples=30, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 63), st.integers(1, 255))
def test_ed25519_agrees_with_cryptography(message: bytes, index: int, flip: int) -> None:
    key = Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    signature = key.sign(message)
    assert verify(public, message, signature)
    broken = bytearray(signature)
    broken[index] ^= flip
    assert not verify(public, message, bytes(broken))
    assert not verify(public, message + b"x", signature)
    assert not verify(public[:31], message, signature)
