"""The body of a review receipt: the receipt it follows, with the reviewer's decision on top."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from shared.core.receipt import MalformedReceipt, signing_payload
from shared.core.review_receipt import REVIEW_REASON, review_receipt_body
from tests.unit.receipts.factory import T1, sample_body

REVIEWED_AT = T1 + timedelta(hours=2)


def _review(followed: dict[str, Any], **changes: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "receipt_id": "rcpt_review",
        "verdict": "VERIFIED",
        "note": "seen in the dashboard",
        "reviewer": "key_admin",
        "reviewed_at": REVIEWED_AT,
        "claimable": True,
    }
    arguments.update(changes)
    return review_receipt_body(followed, **arguments)


def test_a_review_keeps_what_was_judged_and_names_the_receipt_it_follows() -> None:
    followed = sample_body()
    body = _review(followed)
    for kept in ("operation_id", "workspace_id", "contract", "subject", "correlation"):
        assert body[kept] == followed[kept]
    assert body["conditions"] == followed["conditions"]
    assert body["evidence"] == followed["evidence"]
    assert body["valid_as_of"] == followed["valid_as_of"]
    assert body["id"] == "rcpt_review"
    assert body["supersedes"] == followed["id"]
    assert (body["verdict"], body["reason"], body["class"]) == ("VERIFIED", REVIEW_REASON, None)
    assert body["decided_at"] == "2026-11-30T09:00:03.250000Z"
    assert body["watch_until"] is None
    assert body["review"] == {
        "follows": followed["id"],
        "followed_verdict": followed["verdict"],
        "reviewer": "key_admin",
        "note": "seen in the dashboard",
        "reviewed_at": "2026-11-30T09:00:03.250000Z",
    }
    assert followed["id"] != body["id"]  # the followed body is not changed
    assert "review" not in followed


@pytest.mark.parametrize(
    ("verdict", "claimable", "level", "expected"),
    [
        ("VERIFIED", True, "succeeded", True),
        ("VERIFIED", False, "succeeded", False),  # the claim does not allow it (not HUMAN_REVIEW)
        ("VERIFIED", True, "created", False),  # a step toward the effect, never the effect
        ("FAILED", True, "succeeded", False),
    ],
)
def test_what_may_be_claimed_after_a_review(
    verdict: str, claimable: bool, level: str, expected: bool
) -> None:
    followed = sample_body()
    followed["contract"] = dict(followed["contract"], completion_level=level)
    body = _review(followed, verdict=verdict, claimable=claimable)
    assert body["safe_to_claim_complete"] is expected


def test_a_version_1_receipt_is_followed_by_a_version_2_review() -> None:
    followed = dict(sample_body(), version=1)
    body = _review(followed)
    assert body["version"] == 2
    assert signing_payload(body) != signing_payload(dict(body, version=1))


@pytest.mark.parametrize("verdict", ["PENDING", "MAYBE"])
def test_a_review_decides_a_final_verdict(verdict: str) -> None:
    with pytest.raises(ValueError, match="cannot decide"):
        _review(sample_body(), verdict=verdict)


def test_a_review_needs_the_id_of_the_receipt_it_follows() -> None:
    with pytest.raises(ValueError, match="no id"):
        _review(dict(sample_body(), id=None))


def test_a_note_json_cannot_say_is_refused_before_signing() -> None:
    with pytest.raises(MalformedReceipt):
        _review(sample_body(), note=float("nan"))
