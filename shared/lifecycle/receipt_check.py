"""Checking a receipt document offline, against a list of receipt keys.

:func:`verify_receipt_document` is what ``provely receipts verify`` and the demo run: the
document must be readable and name a known key before its signature can say anything; only a
matching signature makes the body worth reading. The answer is one of three exit codes
(:class:`Verification`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from shared.core.receipt import ALGORITHM, MalformedReceipt, parse_receipt_document, signing_payload
from shared.lifecycle.receipt_keyring import KeyRing, verify_payload

__all__ = ["Verification", "VerificationResult", "verify_receipt_document"]


class Verification(IntEnum):
    """Exit codes of ``provely receipts verify``."""

    VALID = 0
    TAMPERED = 1
    UNCHECKABLE = 2


@dataclass(frozen=True, slots=True)
class VerificationResult:
    status: Verification
    reason: str
    receipt_id: str | None = None
    operation_id: str | None = None
    verdict: str | None = None
    key_id: str | None = None
    key_status: str | None = None
    supersedes: str | None = None
    completion_level: str | None = None
    safe_to_claim_complete: bool | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "result": self.status.name.lower(),
            "exit_code": int(self.status),
            "reason": self.reason,
            "receipt_id": self.receipt_id,
            "operation_id": self.operation_id,
            "verdict": self.verdict,
            "key_id": self.key_id,
            "key_status": self.key_status,
            "supersedes": self.supersedes,
            "completion_level": self.completion_level,
            "safe_to_claim_complete": self.safe_to_claim_complete,
        }


def _text(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    return value if isinstance(value, str) else None


def verify_receipt_document(data: bytes | str, keyring: KeyRing) -> VerificationResult:
    """Check a receipt document against ``keyring``: valid (0), tampered (1), cannot check (2).

    Order matters for the answer: the document must be readable and name a known key before the
    signature can say anything; only a signature that matches makes the body's content worth
    reading (its version).
    """
    try:
        document = parse_receipt_document(data)
    except MalformedReceipt as exc:
        return VerificationResult(Verification.UNCHECKABLE, f"malformed receipt: {exc}")
    if document.alg != ALGORITHM:
        return VerificationResult(
            Verification.UNCHECKABLE,
            f"unsupported signature algorithm {document.alg!r} (expected {ALGORITHM})",
            key_id=document.key_id,
        )
    key = keyring.get(document.key_id)
    if key is None:
        return VerificationResult(
            Verification.UNCHECKABLE,
            f"unknown key {document.key_id}: it is not in the key list",
            key_id=document.key_id,
        )
    body = document.body
    found = body.get("contract")
    contract: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    claim = body.get("safe_to_claim_complete")

    def result(status: Verification, reason: str) -> VerificationResult:
        return VerificationResult(
            status,
            reason,
            receipt_id=_text(body, "id"),
            operation_id=_text(body, "operation_id"),
            verdict=_text(body, "verdict"),
            key_id=key.key_id,
            key_status=key.status,
            supersedes=_text(body, "supersedes"),
            completion_level=_text(contract, "completion_level"),
            safe_to_claim_complete=claim if isinstance(claim, bool) else None,
        )

    try:
        # The version (inside the signed body) names the canonical form: 1 sorted json.dumps,
        # 2 RFC 8785. Changing it changes the signed bytes, so it cannot pick a weaker form.
        payload = signing_payload(body)
    except MalformedReceipt as exc:
        return result(Verification.UNCHECKABLE, f"cannot check: {exc}")
    if not verify_payload(key.public_key, payload, document.signature):
        return result(
            Verification.TAMPERED,
            f"tampered: the signature does not match the receipt under key {key.key_id}",
        )
    key_note = key.status
    if key.status == "retired" and key.retired_at:
        key_note = f"retired {key.retired_at}"
    summary = (
        f"valid: receipt {_text(body, 'id')} of {_text(body, 'operation_id')} "
        f"({_text(body, 'verdict')}) signed by key {key.key_id} ({key_note})"
    )
    if _text(body, "supersedes"):
        summary += f"; it supersedes {_text(body, 'supersedes')}"
    summary += (
        f"; completion level {_text(contract, 'completion_level')}, "
        f"safe_to_claim_complete={str(claim).lower()}"
    )
    return result(Verification.VALID, summary)
