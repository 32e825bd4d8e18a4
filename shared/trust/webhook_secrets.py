"""A connection's webhook signing secrets, each with the time it stops verifying.

A rotation adds a new secret and keeps the ones before it for an overlap: deliveries the
provider signed with the old secret (sent before the switch, or retried after it) are accepted
until ``until``, and refused after. The list is stored encrypted as one JSON array
(``shared.trust.secrets``): an item is the secret itself (it never expires: what ``provely
connection set`` stores) or ``{"secret": …, "until": "<ISO 8601 UTC>"}``.

The time is enforced where deliveries are verified (:func:`verifying`, called with the
delivery's arrival time), not by a job that edits the list later: a secret past its time stops
verifying on the first delivery after it, whatever else runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["WebhookSecret", "from_json", "rotated", "to_json", "verifying"]


@dataclass(frozen=True, slots=True)
class WebhookSecret:
    value: str
    until: datetime | None = None
    """When it stops verifying (exclusive); None: never."""

    def verifies_at(self, when: datetime) -> bool:
        return self.until is None or when < self.until


def to_json(secrets: Sequence[WebhookSecret]) -> list[Any]:
    return [
        s.value if s.until is None else {"secret": s.value, "until": s.until.isoformat()}
        for s in secrets
    ]


def from_json(items: Any) -> list[WebhookSecret]:
    """The stored list; ValueError when it is not one this module wrote."""
    if not isinstance(items, list):
        raise ValueError("stored webhook secrets are not a list")
    found: list[WebhookSecret] = []
    for item in items:
        if isinstance(item, str):
            found.append(WebhookSecret(item))
        elif (
            isinstance(item, dict)
            and isinstance(item.get("secret"), str)
            and isinstance(item.get("until"), str)
        ):
            until = datetime.fromisoformat(item["until"])
            if until.tzinfo is None:
                raise ValueError("a stored webhook secret's end time has no zone")
            found.append(WebhookSecret(item["secret"], until))
        else:
            raise ValueError("a stored webhook secret is neither a string nor {secret, until}")
    return found


def verifying(secrets: Sequence[WebhookSecret], when: datetime) -> tuple[str, ...]:
    """The non-empty secrets that still verify a delivery received at ``when``."""
    return tuple(s.value for s in secrets if s.value and s.verifies_at(when))


def rotated(
    secrets: Sequence[WebhookSecret], *, new: str, overlap_until: datetime, now: datetime
) -> list[WebhookSecret]:
    """``new`` first (no end), then each secret still verifying at ``now``, ending at the
    earlier of its own end and ``overlap_until``; those already ended are dropped. Adding a
    secret that is already there ends its other copies rather than keeping two."""
    kept = [
        WebhookSecret(s.value, overlap_until if s.until is None else min(s.until, overlap_until))
        for s in secrets
        if s.verifies_at(now) and s.value != new
    ]
    return [WebhookSecret(new), *kept]
