"""The receipt body: its fields, its one canonical spelling, and what it refuses to say."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import rfc8785

from shared.core.receipt import (
    BODY_FIELDS,
    MalformedReceipt,
    ReceiptEvidence,
    iso_time,
    json_value,
    parse_json_strict,
    parse_receipt_document,
    receipt_document,
    safe_to_claim_complete,
    signing_payload,
)
from shared.core.types import ConditionResult
from tests.unit.receipts.factory import CONTRACT, T0, T1, sample_body


def test_body_has_exactly_the_documented_fields() -> None:
    body = sample_body()
    assert sorted(body) == sorted(BODY_FIELDS)
    assert body["version"] == 2
    assert body["contract"] == {
        "id": CONTRACT.id,
        "version": CONTRACT.version,
        "hash": CONTRACT.hash,
        "completion_level": "succeeded",
    }
    assert body["correlation"] == [
        {"strategy": "resource_id", "assurance": "strong"},
        {"strategy": "idempotency_key", "assurance": "strong"},
    ]
    assert body["conditions"][0] == {
        "id": "refund_status_succeeded",
        "kind": "completion",
        "holds": True,
        "observed": "succeeded",
        "expected": "succeeded",
    }
    assert body["evidence"][1] == {
        "channel": "refund_succeeded_events",
        "level": "E3",
        "observed_at": "2026-11-30T07:00:03.250000Z",
        "provider_timestamp": "2026-11-30T07:00:00.000000Z",
        "digest": "b" * 64,
    }
    assert body["supersedes"] is None
    assert body["safe_to_claim_complete"] is True


def test_payload_is_rfc8785() -> None:
    body = sample_body()
    payload = signing_payload(body)
    assert payload == rfc8785.dumps(body)
    assert b" " not in payload.replace(b"stripe.refund", b"")
    # Same content in another key order gives the same bytes.
    reordered = dict(reversed(list(body.items())))
    assert signing_payload(reordered) == payload


# Values whose spelling differs between Python's json.dumps and RFC 8785: JCS writes numbers
# as ECMAScript does and sorts keys by UTF-16 code units (a non-BMP key, a surrogate pair,
# sorts before U+FFFF there; after it by code point).
JCS_CASES = [
    ({"a": 2000.0}, b'{"a":2000}', b'{"a":2000.0}'),
    ({"a": 1e16}, b'{"a":10000000000000000}', b'{"a":1e+16}'),
    ({"a": 1e21}, b'{"a":1e+21}', b'{"a":1e+21}'),
    ({"a": 0.000001}, b'{"a":0.000001}', b'{"a":1e-06}'),
    (
        {"\uffff": 1, "\U0001f600": 2},
        '{"\U0001f600":2,"\uffff":1}'.encode(),
        '{"\uffff":1,"\U0001f600":2}'.encode(),
    ),
]


@pytest.mark.parametrize(("value", "jcs", "legacy"), JCS_CASES)
def test_v2_payload_differs_from_json_dumps_where_jcs_does(
    value: dict[str, Any], jcs: bytes, legacy: bytes
) -> None:
    body = sample_body(subject=value)
    v2 = signing_payload(body)
    v1 = signing_payload(body | {"version": 1})
    assert b'"subject":' + jcs in v2
    assert b'"subject":' + legacy in v1


def test_unsafe_integers_are_written_as_strings() -> None:
    body = sample_body(subject={"big": 2**60, "edge": 2**53 - 1, "neg": -(2**53)})
    assert body["subject"] == {"big": str(2**60), "edge": 2**53 - 1, "neg": str(-(2**53))}
    assert b'"big":"1152921504606846976"' in signing_payload(body)


def test_payload_is_utf8_not_escaped() -> None:
    body = sample_body(reason="remboursé")
    assert "remboursé".encode() in signing_payload(body)


def test_times_are_utc_with_z_whatever_the_zone_given() -> None:
    paris = timezone(timedelta(hours=1))
    assert iso_time(datetime(2026, 11, 30, 8, 0, tzinfo=paris)) == "2026-11-30T07:00:00.000000Z"
    assert iso_time(datetime(2026, 11, 30, 7, 0)) == "2026-11-30T07:00:00.000000Z"


def test_evidence_order_does_not_depend_on_input_order() -> None:
    a = ReceiptEvidence("refund_succeeded_events", "E3", T1, T0, "b" * 64)
    b = ReceiptEvidence("refund_readback", "E2", T1, None, "a" * 64)
    c = ReceiptEvidence("refund_succeeded_events", "E3", T1, T1, "c" * 64)
    one = sample_body(evidence=[a, b, c])
    two = sample_body(evidence=[c, b, a])
    assert one == two
    assert [e["digest"][0] for e in one["evidence"]] == ["a", "b", "c"]


def test_correlation_is_deduplicated_in_order() -> None:
    body = sample_body(
        correlation=[("resource_id", "strong"), ("fingerprint", "weak"), ("resource_id", "strong")]
    )
    assert [c["strategy"] for c in body["correlation"]] == ["resource_id", "fingerprint"]


@pytest.mark.parametrize(
    ("verdict", "level", "expected"),
    [
        ("VERIFIED", "succeeded", True),
        ("VERIFIED", "created", False),  # safety rule 2: a lower level is not terminal success
        ("VERIFIED", "Created", False),
        ("VERIFIED", "accepted", False),
        ("VERIFIED", "merged", True),
        ("FAILED", "succeeded", False),
        ("CONTRADICTED", "succeeded", False),
        ("UNVERIFIABLE", "succeeded", False),
        ("EXPIRED", "succeeded", False),
    ],
)
def test_safe_to_claim_complete(verdict: str, level: str, expected: bool) -> None:
    assert safe_to_claim_complete(verdict, level) is expected


def test_created_level_receipt_never_claims_completion() -> None:
    contract = CONTRACT.__class__(
        id="stripe.refund.created", version="1.0.0", hash="0" * 64, completion_level="created"
    )
    assert sample_body(contract=contract)["safe_to_claim_complete"] is False


def test_review_receipt_never_claims_completion() -> None:
    assert sample_body(claimable=False)["safe_to_claim_complete"] is False


@pytest.mark.parametrize("verdict", ["PENDING", "MAYBE", ""])
def test_no_receipt_for_an_open_or_unknown_verdict(verdict: str) -> None:
    with pytest.raises(ValueError, match="no receipt"):
        sample_body(verdict=verdict)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinities_are_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="NaN or an infinity"):
        sample_body(conditions=[ConditionResult("x", "completion", True, bad, 1)])


def test_objects_json_cannot_say_are_refused() -> None:
    with pytest.raises(ValueError, match="cannot hold a"):
        json_value(object())
    with pytest.raises(ValueError, match="cannot hold a"):
        json_value({1, 2})


def test_json_value_spellings() -> None:
    from shared.core.expressions import UNKNOWN

    assert json_value(UNKNOWN) == "UNKNOWN"  # as the stored decision spells it
    assert json_value((1, "a", None)) == [1, "a", None]
    assert json_value({"t": T0}) == {"t": "2026-11-30T07:00:00.000000Z"}
    assert json_value(T0.date()) == "2026-11-30"


def test_document_round_trip() -> None:
    body = sample_body()
    document = receipt_document(body, signature="sig", key_id="k1")
    parsed = parse_receipt_document(json.dumps(document))
    assert parsed.body == body
    assert (parsed.signature, parsed.key_id, parsed.alg) == ("sig", "k1", "Ed25519")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "not valid JSON"),
        ("{", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        ("[]", "is a JSON object"),
        ('{"receipt": {}, "signature": "s"}', "missing key_id"),
        ('{"receipt": [], "signature": "s", "key_id": "k"}', "'receipt' is not"),
        ('{"receipt": {}, "signature": 5, "key_id": "k"}', "'signature' is not"),
        ('{"receipt": {}, "signature": "", "key_id": "k"}', "'signature' is not"),
        ('{"receipt": {}, "signature": "s", "key_id": null}', "'key_id' is not"),
        ('{"receipt": {}, "signature": "s", "key_id": "k", "alg": 1}', "'alg' is not"),
        ('{"receipt": {"a": NaN}, "signature": "s", "key_id": "k"}', "NaN is not allowed"),
        ('{"receipt": {"a": Infinity}, "signature": "s", "key_id": "k"}', "Infinity"),
        ('{"receipt": {"a": 1, "a": 2}, "signature": "s", "key_id": "k"}', "duplicate key"),
    ],
)
def test_malformed_documents(text: str | bytes, message: str) -> None:
    with pytest.raises(MalformedReceipt, match=message):
        parse_receipt_document(text)


def test_strict_parser_accepts_plain_json() -> None:
    assert parse_json_strict(b'{"a": [1, 2.5, "x", null, true]}') == {
        "a": [1, 2.5, "x", None, True]
    }
