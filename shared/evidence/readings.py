"""What a verifier returns: one reading of one channel, ready to be stored as an observation."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.core.types import ObservationStatus

__all__ = ["Reading", "digest_of"]


def digest_of(raw: bytes) -> str:
    """sha256 (hex) of the bytes a reading was made from; receipts cite it."""
    return hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True, slots=True)
class Reading:
    """One reading of one channel.

    ``value`` is the parsed resource (``http``) or the event reduction (``webhook``); ``raw``
    the bytes it came from and ``digest`` their sha256. ``error`` says why a reading that is not
    ``ok`` failed, in a short machine-readable form (``http_503``, ``timeout``, ``too_large`` …).
    """

    channel: str
    status: ObservationStatus
    observed_at: datetime
    value: Any = None
    raw: bytes | None = None
    digest: str | None = None
    http_status: int | None = None
    error: str | None = None
    provider_timestamp: datetime | None = None
    latency_ms: float | None = None
