"""The reasons of an open decision that the engine explains, in the words a caller is shown.

``decide`` names a reason for every verdict; while the operation stays open (PENDING), the
reasons below also come with a sentence (``Decision.explanation``) that says what the runtime
waits for. ``ACTION_REJECTED`` is the reason of a FAILED verdict on a confirmed rejection.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["ACTION_REJECTED", "AWAITING_REJECTION", "EXPLANATIONS"]

EXPLANATIONS: Final[Mapping[str, str]] = {
    "awaiting_correlation": (
        "The subject of the operation is not known yet, so no evidence can be tied to it."
    ),
    "correlation_conflict": (
        "The reported subject and the one learned from the provider differ; nothing decides."
    ),
    "awaiting_evidence": "The evidence the contract asks for has not arrived yet.",
    "stale_reading": "The latest reading is older than the freshness window and cannot decide.",
    "evidence_requirements_not_met": (
        "The conditions hold, but not on evidence of the level and independence required."
    ),
    "evidence_unavailable": (
        "A channel could not answer; the runtime observes again and a later reading decides."
    ),
    "inconsistent_reading": (
        "A reading went backwards against an earlier one (a lagging read of the provider); it "
        "decides nothing, and the runtime reads again until a consistent reading comes."
    ),
    "awaiting_rejection_confirmation": (
        "The agent reported that the provider refused the action; that is its word alone, so "
        "the runtime observes until independent evidence confirms nothing was created."
    ),
}

ACTION_REJECTED: Final = "action_rejected"
AWAITING_REJECTION: Final = "awaiting_rejection_confirmation"
