"""What the sandbox is set to: settings fixed at start, faults changed on demand, and the
refund outcomes a test can ask for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["OUTCOMES", "Faults", "Outcome", "SandboxSettings"]


Outcome = Literal[
    "succeeded",
    "failed",
    "canceled",
    "requires_action",
    "stuck_pending",
    "succeeded_then_failed",
    "unknown_status",
]
OUTCOMES: tuple[str, ...] = (
    "succeeded",
    "failed",
    "canceled",
    "requires_action",
    "stuck_pending",
    "succeeded_then_failed",
    "unknown_status",
)


class Faults(BaseModel):
    """Faults on demand; every field has a harmless default. Changed with ``/_sandbox/faults``."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    duplicate: int = Field(1, ge=1, le=20, description="copies of each delivery")
    order: Literal["in_order", "reversed", "shuffled"] = Field(
        "in_order", description="reversed/shuffled buffer deliveries until /_sandbox/release"
    )
    shuffle_seed: int | None = None
    delay_ms: int = Field(0, ge=0, description="added before each new delivery")
    drop_types: list[str] = Field(default_factory=list, description="event types never delivered")
    api_version: str | None = Field(None, description="api_version stamped on new events")
    clock_offset_s: float = Field(0.0, description="skew of the provider clock")
    outage_until: float | None = Field(None, description="scheduling-clock time the outage ends")
    read_lag_ms: int = Field(
        0, ge=0, description="refund readbacks and lists show each refund as it was this long ago"
    )
    default_outcome: Outcome = "succeeded"


@dataclass(frozen=True)
class SandboxSettings:
    """Fixed at start: settlement delay, API version, webhook retry policy."""

    settle_ms: int = 1000
    api_version: str = "2026-08-26"
    retry_base_ms: int = 1000
    retry_max_attempts: int = 6
    retry_max_ms: int = 3_600_000
