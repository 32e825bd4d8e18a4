"""The receipt as data: its body, the bytes that get signed, and the document that travels.

A receipt states one final verdict of one operation: the contract it was judged against (with
its hash), the conditions as evaluated, the correlation strategies that tied the evidence to the
operation and the digest of every piece of evidence. The signature (Ed25519, done outside the
core) covers ``signing_payload(body)``, the canonical JSON of the body. Version 2 bodies (every
receipt issued now) are canonicalized with RFC 8785, the JSON Canonicalization Scheme (the
``rfc8785`` library, pure and free of I/O), so a verifier in any language that implements the
standard gets the same bytes (``shared.core.jcs`` spells them as the ``rfc8785`` library does,
faster). Version 1 bodies were signed over Python's sorted, compact
``json.dumps``; they are still read and checked with that spelling.

The signed document is ``{"receipt": body, "signature": <base64url>, "key_id": …,
"alg": "Ed25519"}``. ``parse_receipt_document`` reads one strictly (duplicate keys, NaN and
non-object bodies are refused) without judging the signature; that is the shell's job.

Nothing here reads a clock or draws an id: the caller passes the receipt id and the times.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from enum import Enum
from typing import Any

import rfc8785

from shared.core import CoreError
from shared.core.contract import canonical_json
from shared.core.jcs import jcs
from shared.core.types import ConditionResult, Verdict

__all__ = [
    "ALGORITHM",
    "BODY_FIELDS",
    "INTERMEDIATE_COMPLETION_LEVELS",
    "JCS_SAFE_INTEGER",
    "READABLE_VERSIONS",
    "RECEIPT_VERSION",
    "MalformedReceipt",
    "ReceiptContract",
    "ReceiptDocument",
    "ReceiptEvidence",
    "build_receipt_body",
    "build_signed_receipt_body",
    "document_bytes",
    "iso_time",
    "json_value",
    "parse_json_strict",
    "parse_receipt_document",
    "receipt_document",
    "safe_to_claim_complete",
    "signing_payload",
]

RECEIPT_VERSION = 2
READABLE_VERSIONS = (1, 2)  # 1: sorted compact json.dumps; 2: RFC 8785 (JCS)

# JCS numbers are IEEE 754 doubles: an integer beyond 2**53 - 1 has no exact spelling, so a v2
# body writes such an integer as its decimal string rather than round it.
JCS_SAFE_INTEGER = 2**53 - 1
ALGORITHM = "Ed25519"

BODY_FIELDS = (
    "version",
    "id",
    "operation_id",
    "workspace_id",
    "contract",
    "verdict",
    "reason",
    "class",
    "safe_to_claim_complete",
    "decided_at",
    "valid_as_of",
    "subject",
    "correlation",
    "conditions",
    "evidence",
    "supersedes",
    "watch_until",
)

# Completion levels that name a step on the way, never the effect itself (safety rule 2): a
# VERIFIED verdict at one of these levels proves the step, and a caller may not tell anyone that
# the effect is complete.
INTERMEDIATE_COMPLETION_LEVELS = frozenset(
    {
        "accepted",
        "created",
        "initiated",
        "in_progress",
        "pending",
        "processing",
        "queued",
        "requested",
        "scheduled",
        "started",
        "submitted",
    }
)


class MalformedReceipt(CoreError, ValueError):
    """A receipt document that cannot be read (not JSON, wrong shape, duplicate keys, …)."""


@dataclass(frozen=True, slots=True)
class ReceiptContract:
    id: str
    version: str
    hash: str
    completion_level: str


@dataclass(frozen=True, slots=True)
class ReceiptEvidence:
    """One piece of evidence: a stored reading or a stored provider event, by its digest."""

    channel: str
    level: str
    observed_at: datetime | None
    provider_timestamp: datetime | None
    digest: str | None


@dataclass(frozen=True, slots=True)
class ReceiptDocument:
    """A parsed receipt document; ``body`` is exactly what was signed (not yet checked)."""

    body: dict[str, Any]
    signature: str
    key_id: str
    alg: str


def iso_time(value: datetime) -> str:
    """UTC ISO-8601 with microseconds and a ``Z``; a naive time is taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    text = value.astimezone(UTC).isoformat(timespec="microseconds")
    return text.removesuffix("+00:00") + "Z"


def json_value(value: Any) -> Any:
    """Turn ``value`` into plain JSON data with one spelling (times in UTC, tuples as lists).

    Raises ``ValueError`` for NaN or infinities and for objects JSON has no word for. Enums
    give their value, so the expressions' UNKNOWN reads ``"UNKNOWN"``, as the operation's
    stored decision spells it. An integer beyond ±(2**53 - 1) becomes its decimal string (JCS
    cannot say it exactly).
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, Enum):
        return json_value(value.value)
    if isinstance(value, int):
        return int(value) if abs(value) <= JCS_SAFE_INTEGER else str(int(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("a receipt cannot hold NaN or an infinity")
        return value
    if isinstance(value, datetime):
        return iso_time(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    raise ValueError(f"a receipt cannot hold a {type(value).__name__}")


def safe_to_claim_complete(verdict: str, completion_level: str) -> bool:
    """True only for VERIFIED at a level that names the effect itself (not a step toward it)."""
    return verdict == Verdict.VERIFIED and (
        completion_level.strip().lower() not in INTERMEDIATE_COMPLETION_LEVELS
    )


def build_receipt_body(**arguments: Any) -> dict[str, Any]:
    """The body of a receipt, as plain JSON data ready to be signed (the arguments of
    :func:`build_signed_receipt_body`)."""
    return build_signed_receipt_body(**arguments)[0]


def build_signed_receipt_body(
    *,
    receipt_id: str,
    operation_id: str,
    workspace_id: str,
    contract: ReceiptContract,
    verdict: str,
    reason: str,
    class_: str | None,
    decided_at: datetime,
    valid_as_of: datetime,
    subject: Mapping[str, Any],
    correlation: Sequence[tuple[str, str]],
    conditions: Sequence[ConditionResult],
    evidence: Sequence[ReceiptEvidence],
    supersedes: str | None = None,
    claimable: bool = True,
    watch_until: datetime | None = None,
) -> tuple[dict[str, Any], bytes]:
    """The body of a receipt, as plain JSON data, and the bytes its signature covers
    (:func:`signing_payload`, spelled once: the signer signs them as they are).

    ``watch_until`` (a VERIFIED verdict): until when late evidence is watched for; a later
    contradiction supersedes this receipt, after it the verdict is settled.
    ``claimable=False`` forces ``safe_to_claim_complete`` to false (a receipt that flags an
    operation for review never lets anyone claim completion, whatever its verdict).
    ``correlation`` is deduplicated keeping the first occurrence; evidence is sorted by
    (channel, provider time, observation time, digest) so that its order does not depend on the
    order rows were read in.
    """
    if verdict not in Verdict.__members__ or verdict == Verdict.PENDING:
        raise ValueError(f"no receipt for a {verdict!r} verdict")
    seen: set[tuple[str, str]] = set()
    strategies: list[dict[str, str]] = []
    for strategy, assurance in correlation:
        if (strategy, assurance) not in seen:
            seen.add((strategy, assurance))
            strategies.append({"strategy": strategy, "assurance": assurance})
    pieces = sorted(
        evidence,
        key=lambda e: (
            e.channel,
            iso_time(e.provider_timestamp) if e.provider_timestamp else "",
            iso_time(e.observed_at) if e.observed_at else "",
            e.digest or "",
        ),
    )
    body: dict[str, Any] = {
        "version": RECEIPT_VERSION,
        "id": receipt_id,
        "operation_id": operation_id,
        "workspace_id": workspace_id,
        "contract": {
            "id": contract.id,
            "version": contract.version,
            "hash": contract.hash,
            "completion_level": contract.completion_level,
        },
        "verdict": str(verdict),
        "reason": reason,
        "class": class_,
        "safe_to_claim_complete": claimable
        and safe_to_claim_complete(verdict, contract.completion_level),
        "decided_at": iso_time(decided_at),
        "valid_as_of": iso_time(valid_as_of),
        "subject": json_value(dict(subject)),
        "correlation": strategies,
        "conditions": [
            {
                "id": c.id,
                "kind": c.kind,
                "holds": c.holds,
                "observed": json_value(c.observed),
                "expected": json_value(c.expected),
            }
            for c in conditions
        ],
        "evidence": [
            {
                "channel": e.channel,
                "level": e.level,
                "observed_at": iso_time(e.observed_at) if e.observed_at else None,
                "provider_timestamp": (
                    iso_time(e.provider_timestamp) if e.provider_timestamp else None
                ),
                "digest": e.digest,
            }
            for e in pieces
        ],
        "supersedes": supersedes,
        "watch_until": iso_time(watch_until) if watch_until is not None else None,
    }
    # Refuses NaN and anything JSON cannot say, before anyone signs.
    return body, signing_payload(body)


def signing_payload(body: Mapping[str, Any]) -> bytes:
    """The exact bytes the signature covers, by the body's ``version``.

    Version 2: RFC 8785 (JCS). Version 1: ``json.dumps`` with sorted keys, compact separators,
    UTF-8, no NaN. Any other version cannot be checked (``MalformedReceipt``): its bytes are
    not known.
    """
    version = body.get("version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise MalformedReceipt(f"receipt version {version!r} is not one this tool reads")
    try:
        if version == 1:
            return canonical_json(body)
        return jcs(dict(body))
    except (TypeError, ValueError, rfc8785.CanonicalizationError) as exc:
        raise MalformedReceipt(f"the receipt body is not canonical JSON data: {exc}") from exc


def receipt_document(body: Mapping[str, Any], *, signature: str, key_id: str) -> dict[str, Any]:
    """The document served and exported: the body with its signature and key id beside it."""
    return {"receipt": dict(body), "signature": signature, "key_id": key_id, "alg": ALGORITHM}


def document_bytes(document: Mapping[str, Any]) -> bytes:
    """A receipt document as JSON text for a file (sorted keys, indented, newline at the end)."""
    text = json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
    return (text + "\n").encode("utf-8")


def _refuse_constant(name: str) -> Any:
    raise MalformedReceipt(f"JSON constant {name} is not allowed")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise MalformedReceipt(f"duplicate key {key!r}")
        result[key] = value
    return result


def parse_json_strict(data: bytes | str) -> Any:
    """Parse JSON refusing duplicate keys, NaN and infinities (two readers must agree)."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_refuse_constant)
    except MalformedReceipt:
        raise
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise MalformedReceipt(f"not valid JSON: {exc}") from exc


def parse_receipt_document(data: bytes | str) -> ReceiptDocument:
    """Read a receipt document; raises ``MalformedReceipt`` with a one-line reason."""
    document = parse_json_strict(data)
    if not isinstance(document, dict):
        raise MalformedReceipt("a receipt document is a JSON object")
    missing = [k for k in ("receipt", "signature", "key_id") if k not in document]
    if missing:
        raise MalformedReceipt(f"missing {', '.join(missing)}")
    body, signature, key_id = document["receipt"], document["signature"], document["key_id"]
    alg = document.get("alg", ALGORITHM)
    if not isinstance(body, dict):
        raise MalformedReceipt("'receipt' is not a JSON object")
    if not isinstance(signature, str) or not signature:
        raise MalformedReceipt("'signature' is not a non-empty string")
    if not isinstance(key_id, str) or not key_id:
        raise MalformedReceipt("'key_id' is not a non-empty string")
    if not isinstance(alg, str):
        raise MalformedReceipt("'alg' is not a string")
    return ReceiptDocument(body=body, signature=signature, key_id=key_id, alg=alg)
