"""What every world does and the bounds its operation is held to (seconds, unless named)."""

from __future__ import annotations

__all__ = [
    "AMOUNT",
    "CONTRACT",
    "CONTRADICTING_STATUSES",
    "FINAL_STATES",
    "LATE_REFUND_STATES",
    "LOST_BOUND_S",
    "OTHER_AMOUNT",
    "OUTAGE_TRY_SLACK_S",
    "RECHECK_BACKOFF_MS",
    "SETTLE_S",
    "STABLE_S",
    "SUPERSEDE_BOUND_S",
    "WAIT_STEP_S",
]

CONTRACT = "stripe.refund.succeeded"
AMOUNT, OTHER_AMOUNT = 2000, 700
SUPERSEDE_BOUND_S = 5.0
LOST_BOUND_S = 60.0
STABLE_S = 8.0
WAIT_STEP_S = 0.05
SETTLE_S = 2.0  # the sandbox's settle_ms in the launcher (DEFAULT_SANDBOX_OPTIONS)
RECHECK_BACKOFF_MS = (5000, 2, 60000)  # the 1.1.0 contract's poll_interval, factor, max
OUTAGE_TRY_SLACK_S = 2.5  # the sweeper's grace and interval, before an overdue recheck is sent
CONTRADICTING_STATUSES = ("failed", "canceled")
LATE_REFUND_STATES = ("HUMAN_REVIEW", "VERIFIED")
"""A rejection followed by the refund under its key: the FAILED superseded, or (the refund came
before the FAILED was decided) judged on the refund."""
FINAL_STATES = ("VERIFIED", "FAILED", "CONTRADICTED", "HUMAN_REVIEW", "UNVERIFIABLE", "EXPIRED")
