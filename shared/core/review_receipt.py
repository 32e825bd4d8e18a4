"""The receipt of a person's review: what was decided, by whom, and which receipt it follows.

A review never rewrites the verdict the runtime reached; it is a new signed statement appended
after it. Its body is the body of the receipt it follows — the same contract, subject,
correlation, conditions and evidence, because a reviewer judges that same record — with:

- a new ``id``; ``verdict`` the reviewer's, ``reason`` ``human_review_resolved``, no ``class``;
- ``decided_at`` the time of the review; ``watch_until`` null (nothing is watched after it);
- ``supersedes`` the followed receipt's id, so every checker already shows the chain;
- ``safe_to_claim_complete`` as the caller's claim allows (never more than the verdict at the
  contract's level allows);
- ``review``: ``{"follows", "followed_verdict", "reviewer", "note", "reviewed_at"}``.

The version is always the current one (RFC 8785): a v1 receipt is followed by a v2 review, and
the old receipt keeps verifying with its own spelling. Pure: the caller passes ids and times.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from shared.core.receipt import (
    RECEIPT_VERSION,
    iso_time,
    safe_to_claim_complete,
    signing_payload,
)
from shared.core.types import Verdict

__all__ = ["REVIEW_REASON", "review_receipt_body"]

REVIEW_REASON = "human_review_resolved"


def review_receipt_body(
    followed: Mapping[str, Any],
    *,
    receipt_id: str,
    verdict: str,
    note: str,
    reviewer: str,
    reviewed_at: datetime,
    claimable: bool,
) -> dict[str, Any]:
    """The body of the review receipt that follows the receipt body ``followed``."""
    if verdict not in Verdict.__members__ or verdict == Verdict.PENDING:
        raise ValueError(f"a review cannot decide {verdict!r}")
    followed_id = followed.get("id")
    if not isinstance(followed_id, str) or not followed_id:
        raise ValueError("the followed receipt has no id")
    contract = followed.get("contract")
    level = contract.get("completion_level") if isinstance(contract, Mapping) else None
    body = dict(followed)
    body.update(
        {
            "version": RECEIPT_VERSION,
            "id": receipt_id,
            "verdict": verdict,
            "reason": REVIEW_REASON,
            "class": None,
            "safe_to_claim_complete": claimable
            and isinstance(level, str)
            and safe_to_claim_complete(verdict, level),
            "decided_at": iso_time(reviewed_at),
            "supersedes": followed_id,
            "watch_until": None,
            "review": {
                "follows": followed_id,
                "followed_verdict": followed.get("verdict"),
                "reviewer": reviewer,
                "note": note,
                "reviewed_at": iso_time(reviewed_at),
            },
        }
    )
    signing_payload(body)  # refuses anything JSON cannot say, before anyone signs
    return body
