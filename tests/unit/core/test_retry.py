"""The frozen retry table, one test per row of ``shared.core.retry.RETRY_TABLE``."""

from __future__ import annotations

import pytest

from shared.core.retry import RETRY_TABLE, retry_guidance
from shared.core.types import OperationState, RetryGuidance, Verdict

S = OperationState
V = Verdict
PERSON = RetryGuidance("never", "no", "person")


@pytest.mark.parametrize("reason", ["awaiting_evidence", "still_transitional", "stale_reading"])
@pytest.mark.parametrize("state", [S.OBSERVING, S.PENDING, None])
def test_retry_row_pending(reason: str, state: OperationState | None) -> None:
    assert retry_guidance(V.PENDING, reason, state) == RetryGuidance("never", "no", "runtime")


def test_retry_row_verified() -> None:
    assert retry_guidance(V.VERIFIED, "all_conditions_hold", S.VERIFIED) == RetryGuidance(
        "never", "no", "runtime"
    )


@pytest.mark.parametrize(
    "reason",
    [
        "refund_on_wrong_charge",
        "refund_amount_mismatch",
        "refund_predates_operation",
        "duplicate_refund_present",
        "canceled",
    ],
)
def test_retry_row_contradicted_any_class(reason: str) -> None:
    assert retry_guidance(V.CONTRADICTED, reason, S.CONTRADICTED) == PERSON


def test_retry_row_failed_provider_reports_failure() -> None:
    assert retry_guidance(V.FAILED, "terminal_failure", S.FAILED) == RetryGuidance(
        "allowed_as_new_operation", "no", "agent"
    )


@pytest.mark.parametrize("state", [S.OBSERVING, S.PENDING])
def test_retry_row_unverifiable_evidence_unavailable(state: OperationState) -> None:
    assert retry_guidance(V.UNVERIFIABLE, "evidence_unavailable", state) == RetryGuidance(
        "never", "yes", "runtime"
    )


@pytest.mark.parametrize(
    ("verdict", "reason", "state"),
    [
        (V.UNVERIFIABLE, "evidence_unavailable_before_timeout", S.HUMAN_REVIEW),
        (V.UNVERIFIABLE, "evidence_unavailable_before_timeout", S.UNVERIFIABLE),
        (V.UNVERIFIABLE, "evidence_unavailable_before_timeout", None),
        (V.UNVERIFIABLE, "evidence_unavailable", S.HUMAN_REVIEW),
        (V.FAILED, "terminal_failure", S.HUMAN_REVIEW),
        (V.VERIFIED, "all_conditions_hold", S.HUMAN_REVIEW),
        (V.PENDING, "awaiting_evidence", S.HUMAN_REVIEW),
    ],
)
def test_retry_row_unverifiable_before_timeout_or_human_review(
    verdict: Verdict, reason: str, state: OperationState | None
) -> None:
    assert retry_guidance(verdict, reason, state) == PERSON


def test_retry_row_expired() -> None:
    assert retry_guidance(V.EXPIRED, "action_window_passed", S.EXPIRED) == PERSON


def test_names_are_accepted() -> None:
    assert retry_guidance("FAILED", "terminal_failure", "FAILED").action == (
        "allowed_as_new_operation"
    )


def test_every_verdict_has_a_row() -> None:
    assert {row[0] for row in RETRY_TABLE if row[0] is not None} == set(Verdict)
    for verdict in Verdict:
        assert retry_guidance(verdict, None).action in {"never", "allowed_as_new_operation"}
