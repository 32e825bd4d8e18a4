"""Ed25519 signing of receipts, key ids, the key ring, and the offline check (no database)."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from shared.core.contract import canonical_json
from shared.core.receipt import receipt_document, signing_payload
from shared.lifecycle.receipt_check import Verification, verify_receipt_document
from shared.lifecycle.receipt_keyring import (
    KeyRing,
    KeyRingError,
    ReceiptKeyError,
    b64url_decode_strict,
    b64url_encode,
    decode_public_key,
    key_id_for,
    load_private_key_file,
    public_key_b64,
    sign_payload,
    verify_payload,
    write_private_key_file,
)
from tests.unit.receipts.factory import changed, get_at, leaves, sample_body, set_at

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
OTHER = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))


def key_entry(private: Ed25519PrivateKey, status: str = "active", **extra: Any) -> dict[str, Any]:
    public = private.public_key()
    return {
        "key_id": key_id_for(public),
        "alg": "Ed25519",
        "public_key": public_key_b64(public),
        "status": status,
        "created_at": "2026-11-01T00:00:00.000000Z",
        "retired_at": None if status == "active" else "2026-11-20T00:00:00.000000Z",
        **extra,
    }


def signed(body: dict[str, Any], private: Ed25519PrivateKey = KEY) -> dict[str, Any]:
    return receipt_document(
        body,
        signature=sign_payload(private, signing_payload(body)),
        key_id=key_id_for(private.public_key()),
    )


RING = KeyRing.from_document({"keys": [key_entry(KEY)]})


def check(document: Any, ring: KeyRing = RING) -> Verification:
    return verify_receipt_document(json.dumps(document), ring).status


def test_key_id_is_sha256_prefix_of_the_raw_public_key() -> None:
    raw = base64.b64decode(public_key_b64(KEY.public_key()))
    assert len(raw) == 32
    assert key_id_for(KEY.public_key()) == hashlib.sha256(raw).hexdigest()[:16]


def test_signature_is_unpadded_base64url_of_64_bytes() -> None:
    signature = sign_payload(KEY, b"payload")
    assert "=" not in signature
    assert "+" not in signature
    assert "/" not in signature
    assert len(b64url_decode_strict(signature) or b"") == 64
    assert verify_payload(KEY.public_key(), b"payload", signature)
    assert not verify_payload(KEY.public_key(), b"payloaD", signature)
    assert not verify_payload(OTHER.public_key(), b"payload", signature)


def test_non_canonical_base64_is_refused() -> None:
    signature = sign_payload(KEY, b"payload")
    # The last character carries 2 unused bits: a spelling that decodes to the same bytes.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(signature[-1])
    twin = signature[:-1] + alphabet[last ^ 1]
    assert twin != signature
    assert b64url_decode_strict(twin) is None
    assert not verify_payload(KEY.public_key(), b"payload", twin)
    assert b64url_decode_strict("not base64!") is None
    assert b64url_decode_strict(b64url_encode(b"abc") + "==") == b"abc"


def test_valid_receipt_verifies() -> None:
    result = verify_receipt_document(json.dumps(signed(sample_body())), RING)
    assert result.status is Verification.VALID
    assert result.reason.startswith("valid: receipt rcpt_")
    assert result.verdict == "VERIFIED"
    assert result.key_id == key_id_for(KEY.public_key())


def test_whitespace_and_key_order_do_not_matter() -> None:
    document = signed(sample_body())
    text = json.dumps(document, indent=4, sort_keys=False)
    assert verify_receipt_document(text, RING).status is Verification.VALID


def _leaf_paths() -> list[tuple[Any, ...]]:
    return leaves(sample_body())


@pytest.mark.parametrize("path", _leaf_paths(), ids=lambda p: ".".join(map(str, p)))
def test_flipping_any_leaf_is_tampering(path: tuple[Any, ...]) -> None:
    document = signed(sample_body())
    body = copy.deepcopy(document["receipt"])
    set_at(body, path, changed(path, get_at(body, path)))
    document["receipt"] = body
    assert check(document) is Verification.TAMPERED


def test_every_body_field_is_covered_by_the_leaf_walk() -> None:
    top = {path[0] for path in _leaf_paths()}
    assert top == set(sample_body())
    assert len(_leaf_paths()) > 40


@pytest.mark.parametrize("field", ["supersedes", "class", "extra"])
def test_adding_or_removing_a_field_is_tampering(field: str) -> None:
    document = signed(sample_body())
    if field in document["receipt"]:
        del document["receipt"][field]
    else:
        document["receipt"][field] = None
    assert check(document) is Verification.TAMPERED


@pytest.mark.parametrize("index", range(64))
def test_flipping_any_signature_byte_is_tampering(index: int) -> None:
    document = signed(sample_body())
    raw = bytearray(b64url_decode_strict(document["signature"]) or b"")
    raw[index] ^= 0x01
    document["signature"] = b64url_encode(bytes(raw))
    assert check(document) is Verification.TAMPERED


@pytest.mark.parametrize("signature", ["AAAA", "!!!", "x" * 86])
def test_garbage_signature_is_tampering(signature: str) -> None:
    document = signed(sample_body())
    document["signature"] = signature
    assert check(document) is Verification.TAMPERED


def test_signature_by_another_key_under_this_key_id_is_tampering() -> None:
    document = signed(sample_body(), OTHER)
    document["key_id"] = key_id_for(KEY.public_key())
    assert check(document) is Verification.TAMPERED


def test_retired_key_still_verifies() -> None:
    ring = KeyRing.from_document({"keys": [key_entry(OTHER), key_entry(KEY, "retired")]})
    result = verify_receipt_document(json.dumps(signed(sample_body())), ring)
    assert result.status is Verification.VALID
    assert result.key_status == "retired"
    assert "retired 2026-11-20" in result.reason


def test_unknown_key_cannot_be_checked() -> None:
    result = verify_receipt_document(json.dumps(signed(sample_body(), OTHER)), RING)
    assert result.status is Verification.UNCHECKABLE
    assert result.reason.startswith("unknown key ")


def test_other_algorithm_cannot_be_checked() -> None:
    document = signed(sample_body())
    document["alg"] = "RS256"
    assert check(document) is Verification.UNCHECKABLE


def test_signed_receipt_of_unknown_version_cannot_be_read() -> None:
    body = sample_body() | {"version": 99}
    document = receipt_document(
        body,
        signature=sign_payload(KEY, canonical_json(body)),
        key_id=key_id_for(KEY.public_key()),
    )
    result = verify_receipt_document(json.dumps(document), RING)
    assert result.status is Verification.UNCHECKABLE
    assert "receipt version 99 is not one this tool reads" in result.reason


def _v1_document(body: dict[str, Any]) -> dict[str, Any]:
    """A receipt as issued before v2: version 1, signed over sorted compact json.dumps."""
    body = body | {"version": 1}
    legacy = json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()
    return receipt_document(
        body, signature=sign_payload(KEY, legacy), key_id=key_id_for(KEY.public_key())
    )


def test_version_1_receipts_still_verify() -> None:
    document = _v1_document(sample_body(reason="remboursé", subject={"amount": 2000.0}))
    assert check(document) is Verification.VALID
    document["receipt"]["reason"] = "rembourse"
    assert check(document) is Verification.TAMPERED


def test_a_v1_signature_does_not_pass_as_v2() -> None:
    # The version is signed: relabelling a v1 receipt as v2 changes the bytes it is checked on.
    document = _v1_document(sample_body(subject={"amount": 2000.0}))
    document["receipt"]["version"] = 2
    assert check(document) is Verification.TAMPERED


def test_supersession_is_reported() -> None:
    body = sample_body(supersedes="rcpt_old")
    result = verify_receipt_document(json.dumps(signed(body)), RING)
    assert result.status is Verification.VALID
    assert result.supersedes == "rcpt_old"
    assert "supersedes rcpt_old" in result.reason


@pytest.mark.parametrize(
    "text", ["", "null", "{}", '{"receipt": {}}', "not json", '{"receipt": 1, "signature": "a"}']
)
def test_malformed_files_cannot_be_checked(text: str) -> None:
    result = verify_receipt_document(text, RING)
    assert result.status is Verification.UNCHECKABLE
    assert result.reason.startswith("malformed receipt: ")


def test_key_ring_refuses_a_key_id_that_is_not_its_key() -> None:
    entry = key_entry(KEY) | {"key_id": key_id_for(OTHER.public_key())}
    with pytest.raises(KeyRingError, match="does not match"):
        KeyRing.from_document({"keys": [entry]})


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("[]", "is not an object"),
        ('{"keys": {}}', "is not an object"),
        ('{"keys": [1]}', "entry is not an object"),
        ('{"keys": [{"key_id": "k"}]}', "without key_id or public_key"),
        ('{"keys": [{"key_id": "k", "public_key": "***"}]}', "not base64"),
        ('{"keys": [{"key_id": "k", "public_key": "AAAA"}]}', "has 3 bytes"),
        ("{", "key list: not valid JSON"),
    ],
)
def test_unreadable_key_lists(document: str, message: str) -> None:
    with pytest.raises(KeyRingError, match=message):
        KeyRing.from_document(document)


def test_key_ring_skips_other_algorithms_and_reads_urlsafe_keys() -> None:
    entry = key_entry(KEY)
    entry["public_key"] = base64.urlsafe_b64encode(base64.b64decode(entry["public_key"])).decode()
    ring = KeyRing.from_document(
        {"keys": [entry, {"key_id": "x", "public_key": "y", "alg": "RS256"}]}
    )
    assert set(ring.keys) == {entry["key_id"]}
    assert decode_public_key(entry["public_key"]) is not None


def test_private_key_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "receipt.pem"
    write_private_key_file(path, KEY)
    assert path.stat().st_mode & 0o777 == 0o600
    loaded = load_private_key_file(path)
    assert key_id_for(loaded.public_key()) == key_id_for(KEY.public_key())
    with pytest.raises(FileExistsError):
        write_private_key_file(path, KEY)


def test_bad_private_key_files(tmp_path: Path) -> None:
    with pytest.raises(ReceiptKeyError, match="cannot read"):
        load_private_key_file(tmp_path / "missing.pem")
    junk = tmp_path / "junk.pem"
    junk.write_text("hello")
    with pytest.raises(ReceiptKeyError, match="not an unencrypted PEM"):
        load_private_key_file(junk)
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key

    ec = tmp_path / "ec.pem"
    ec.write_bytes(
        generate_private_key(SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(ReceiptKeyError, match="non-Ed25519"):
        load_private_key_file(ec)
