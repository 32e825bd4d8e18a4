"""Webhook signature schemes: one small verifier (and its signing fake) per provider scheme.

A delivery is authentic when one of the connection's active secrets produced one of the
signatures it carries, over the exact bytes received, and (for schemes that sign a timestamp)
the signed timestamp lies within ``tolerance_s`` of ``now`` on either side. Everything here is
pure: no clock, no I/O; the caller passes the body, the headers, the secrets and the time.

Schemes (the connection's ``signature_scheme`` names one):

``stripe``
    ``Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>…][,v0=…]``; HMAC-SHA256 keyed with
    the whole secret string (``whsec_…`` as UTF-8) over ``b"<t>." + body``. Only ``v1`` counts;
    a header that carries nothing but ``v0`` is refused.
``standard_webhooks``
    ``webhook-id``, ``webhook-timestamp`` (unix seconds) and ``webhook-signature`` holding
    space-separated ``v1,<base64>`` entries; HMAC-SHA256 keyed with the base64-decoded part of a
    ``whsec_<base64>`` secret over ``b"<id>.<timestamp>." + body``.
``github``
    ``X-Hub-Signature-256: sha256=<hex>``, HMAC-SHA256 keyed with the secret (UTF-8) over the
    body. GitHub signs no timestamp, so no tolerance applies; ``X-GitHub-Delivery`` (the
    delivery id, unsigned) and ``X-GitHub-Event`` (the event type) are passed through.

Errors::

    SignatureError            a delivery refused; ``reason`` is a short machine-readable id
    UnknownSchemeError        a connection names a scheme this module does not know (ValueError)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

__all__ = [
    "DEFAULT_TOLERANCE_S",
    "GITHUB",
    "SCHEMES",
    "STANDARD_WEBHOOKS",
    "STRIPE",
    "GitHubScheme",
    "SignatureError",
    "SignatureScheme",
    "StandardWebhooksScheme",
    "StripeScheme",
    "UnknownSchemeError",
    "VerifiedDelivery",
    "scheme_for",
]

DEFAULT_TOLERANCE_S = 300
"""Largest distance, either side of now, between a signed timestamp and the receiver's clock."""

MAX_SIGNATURES = 32
"""More signature entries than this in one header is refused (bounds the work per delivery)."""


class SignatureError(Exception):
    """A delivery whose signature does not hold; it must be refused and stored nowhere."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class UnknownSchemeError(ValueError):
    """A connection names a signature scheme that does not exist."""


@dataclass(frozen=True, slots=True)
class VerifiedDelivery:
    """What a successful check learned about the delivery (never the body's content)."""

    scheme: str
    secret_index: int
    """Position in ``secrets`` of the secret that matched (rotation telemetry)."""
    timestamp: int | None = None
    """The signed timestamp (unix seconds), for schemes that sign one. Not the event's time."""
    delivery_id: str | None = None
    """The delivery id the scheme carries in a header (Standard Webhooks, GitHub)."""
    event_type: str | None = None
    """The event type a header names (GitHub's ``X-GitHub-Event``)."""


class SignatureScheme(Protocol):
    """One provider's signature scheme: a verifier and the signing side kept beside it."""

    name: str

    def verify(
        self,
        *,
        body: bytes,
        headers: Mapping[str, str],
        secrets: Sequence[str],
        tolerance_s: int = DEFAULT_TOLERANCE_S,
        now: datetime | float,
    ) -> VerifiedDelivery: ...

    def sign(
        self,
        *,
        body: bytes,
        secrets: Sequence[str],
        timestamp: int,
        delivery_id: str = "",
        event_type: str = "",
    ) -> dict[str, str]: ...


def _epoch(now: datetime | float) -> float:
    return now.timestamp() if isinstance(now, datetime) else float(now)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive header lookup (``name`` is lower case)."""
    value = headers.get(name)
    if value is not None:
        return value
    for key, candidate in headers.items():
        if key.lower() == name:
            return candidate
    return None


def _ascii(value: str) -> bytes:
    return value.encode("utf-8", "replace")


def _check_tolerance(timestamp: int, now: datetime | float, tolerance_s: int) -> None:
    # Signed timestamps are whole seconds: compare at that precision.
    if abs(math.floor(_epoch(now)) - timestamp) > tolerance_s:
        raise SignatureError(
            "timestamp_out_of_tolerance",
            f"the signed timestamp is more than {tolerance_s} s away from the receiver's clock",
        )


def _require_secrets(secrets: Sequence[str]) -> None:
    if not secrets:
        raise SignatureError("no_secret", "the connection has no active signing secret")


def _parse_unix_seconds(value: str) -> int:
    text = value.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 12:
        raise SignatureError("malformed_header", "the signed timestamp is not unix seconds")
    return int(text)


class StripeScheme:
    """Stripe's ``Stripe-Signature`` scheme (``t=…,v1=…``)."""

    name = "stripe"
    header = "stripe-signature"

    @staticmethod
    def _digest(secret: str, timestamp: int, body: bytes) -> bytes:
        mac = hmac.new(secret.encode("utf-8"), str(timestamp).encode("ascii"), hashlib.sha256)
        mac.update(b".")
        mac.update(body)
        return mac.hexdigest().encode("ascii")

    def verify(
        self,
        *,
        body: bytes,
        headers: Mapping[str, str],
        secrets: Sequence[str],
        tolerance_s: int = DEFAULT_TOLERANCE_S,
        now: datetime | float,
    ) -> VerifiedDelivery:
        raw = _header(headers, self.header)
        if not raw:
            raise SignatureError("missing_header", "the Stripe-Signature header is missing")
        _require_secrets(secrets)
        timestamps: list[str] = []
        candidates: list[bytes] = []
        for item in raw.split(","):
            key, sep, value = item.strip().partition("=")
            if not sep:
                continue
            if key == "t":
                timestamps.append(value)
            elif key == "v1":
                candidates.append(_ascii(value.strip()))
        if len(timestamps) != 1:
            raise SignatureError("malformed_header", "the header must carry exactly one t=")
        timestamp = _parse_unix_seconds(timestamps[0])
        if not candidates:
            raise SignatureError("no_v1_signature", "the header carries no v1 signature")
        if len(candidates) > MAX_SIGNATURES:
            raise SignatureError("malformed_header", "the header carries too many signatures")
        for index, secret in enumerate(secrets):
            expected = self._digest(secret, timestamp, body)
            if any(hmac.compare_digest(expected, candidate) for candidate in candidates):
                _check_tolerance(timestamp, now, tolerance_s)
                return VerifiedDelivery(scheme=self.name, secret_index=index, timestamp=timestamp)
        raise SignatureError("no_matching_signature", "no signature matches an active secret")

    def sign(
        self,
        *,
        body: bytes,
        secrets: Sequence[str],
        timestamp: int,
        delivery_id: str = "",
        event_type: str = "",
    ) -> dict[str, str]:
        """Headers a Stripe delivery signed with each of ``secrets`` carries (tests, sandbox)."""
        parts = [f"t={timestamp}"]
        parts += [f"v1={self._digest(s, timestamp, body).decode('ascii')}" for s in secrets]
        return {"Stripe-Signature": ",".join(parts)}


class StandardWebhooksScheme:
    """The Standard Webhooks scheme (``webhook-id``, ``-timestamp``, ``-signature`` headers)."""

    name = "standard_webhooks"
    prefix = "whsec_"

    @classmethod
    def key(cls, secret: str) -> bytes | None:
        """The HMAC key of a ``whsec_<base64>`` secret (None when it is not valid base64)."""
        text = secret.removeprefix(cls.prefix)
        try:
            key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
        except (binascii.Error, ValueError):
            return None
        return key or None

    @staticmethod
    def _digest(key: bytes, msg_id: str, timestamp: str, body: bytes) -> bytes:
        mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode(), hashlib.sha256)
        mac.update(body)
        return mac.digest()

    def verify(
        self,
        *,
        body: bytes,
        headers: Mapping[str, str],
        secrets: Sequence[str],
        tolerance_s: int = DEFAULT_TOLERANCE_S,
        now: datetime | float,
    ) -> VerifiedDelivery:
        msg_id = _header(headers, "webhook-id")
        stamp = _header(headers, "webhook-timestamp")
        raw = _header(headers, "webhook-signature")
        if not (msg_id and stamp and raw):
            raise SignatureError(
                "missing_header",
                "webhook-id, webhook-timestamp and webhook-signature are all required",
            )
        _require_secrets(secrets)
        timestamp = _parse_unix_seconds(stamp)
        candidates: list[bytes] = []
        for entry in raw.split():
            version, sep, value = entry.partition(",")
            if version != "v1" or not sep:
                continue
            try:
                candidates.append(base64.b64decode(value, validate=True))
            except (binascii.Error, ValueError):
                continue
        if not candidates:
            raise SignatureError("no_v1_signature", "the header carries no v1 signature")
        if len(candidates) > MAX_SIGNATURES:
            raise SignatureError("malformed_header", "the header carries too many signatures")
        keys = [(index, self.key(secret)) for index, secret in enumerate(secrets)]
        usable = [(index, key) for index, key in keys if key is not None]
        if not usable:
            raise SignatureError("no_secret", "no active secret is a valid whsec_ secret")
        for index, key in usable:
            expected = self._digest(key, msg_id, stamp.strip(), body)
            if any(hmac.compare_digest(expected, candidate) for candidate in candidates):
                _check_tolerance(timestamp, now, tolerance_s)
                return VerifiedDelivery(
                    scheme=self.name, secret_index=index, timestamp=timestamp, delivery_id=msg_id
                )
        raise SignatureError("no_matching_signature", "no signature matches an active secret")

    def sign(
        self,
        *,
        body: bytes,
        secrets: Sequence[str],
        timestamp: int,
        delivery_id: str = "",
        event_type: str = "",
    ) -> dict[str, str]:
        entries = []
        for secret in secrets:
            key = self.key(secret)
            if key is None:
                raise ValueError("a Standard Webhooks secret must be whsec_<base64>")
            digest = self._digest(key, delivery_id, str(timestamp), body)
            entries.append("v1," + base64.b64encode(digest).decode("ascii"))
        return {
            "webhook-id": delivery_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": " ".join(entries),
        }


class GitHubScheme:
    """GitHub's ``X-Hub-Signature-256: sha256=<hex>`` scheme (no signed timestamp)."""

    name = "github"
    header = "x-hub-signature-256"

    @staticmethod
    def _digest(secret: str, body: bytes) -> bytes:
        return hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest().encode("ascii")

    def verify(
        self,
        *,
        body: bytes,
        headers: Mapping[str, str],
        secrets: Sequence[str],
        tolerance_s: int = DEFAULT_TOLERANCE_S,
        now: datetime | float,
    ) -> VerifiedDelivery:
        raw = _header(headers, self.header)
        if not raw:
            raise SignatureError("missing_header", "the X-Hub-Signature-256 header is missing")
        _require_secrets(secrets)
        algorithm, sep, value = raw.strip().partition("=")
        if algorithm != "sha256" or not sep:
            raise SignatureError("no_v1_signature", "the header carries no sha256= signature")
        candidate = _ascii(value.strip().lower())
        for index, secret in enumerate(secrets):
            if hmac.compare_digest(self._digest(secret, body), candidate):
                return VerifiedDelivery(
                    scheme=self.name,
                    secret_index=index,
                    delivery_id=_header(headers, "x-github-delivery") or None,
                    event_type=_header(headers, "x-github-event") or None,
                )
        raise SignatureError("no_matching_signature", "no signature matches an active secret")

    def sign(
        self,
        *,
        body: bytes,
        secrets: Sequence[str],
        timestamp: int = 0,
        delivery_id: str = "",
        event_type: str = "",
    ) -> dict[str, str]:
        if len(secrets) != 1:
            raise ValueError("a GitHub delivery carries exactly one signature")
        headers = {"X-Hub-Signature-256": "sha256=" + self._digest(secrets[0], body).decode()}
        if delivery_id:
            headers["X-GitHub-Delivery"] = delivery_id
        if event_type:
            headers["X-GitHub-Event"] = event_type
        return headers


STRIPE = StripeScheme()
STANDARD_WEBHOOKS = StandardWebhooksScheme()
GITHUB = GitHubScheme()

SCHEMES: Mapping[str, SignatureScheme] = {
    STRIPE.name: STRIPE,
    STANDARD_WEBHOOKS.name: STANDARD_WEBHOOKS,
    GITHUB.name: GITHUB,
}


def scheme_for(name: str) -> SignatureScheme:
    """The scheme a connection names (``stripe``, ``standard_webhooks``, ``github``)."""
    try:
        return SCHEMES[name]
    except KeyError:
        raise UnknownSchemeError(f"unknown signature scheme {name!r}") from None
