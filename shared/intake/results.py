"""What the intake takes and hands back: a :class:`Delivery` (one verified, parsed event and
where it came from), the :class:`Link` of an event to an operation, and the
:class:`IntakeResult` of an event — its links, the operations that learned their subject from
it, the wakes, and the new links whose event cannot count. Which links are wakes
(``to_wake``) and which are late evidence (``late``) is said here, once, for every path that
correlates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from shared.intake.parse import ParsedEvent
from shared.intake.rules import STRONG

__all__ = ["Delivery", "IntakeResult", "Link"]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One verified, parsed delivery for :func:`store_many`."""

    workspace_id: str
    provider: str
    event: ParsedEvent
    raw: bytes
    now: datetime


@dataclass(frozen=True, slots=True)
class Link:
    """A link written (``upgraded``: an earlier weak link of the pair became strong; ``older``:
    the event's provider timestamp is before the operation's creation, so its contract may set
    it aside, ``shared.intake.ignored``)."""

    operation_id: str
    event_pk: int
    strategy: str
    assurance: str
    final: bool
    upgraded: bool = False
    older: bool = False


@dataclass(slots=True)
class IntakeResult:
    """What one verified delivery did to the record (filled in the caller's transaction)."""

    event_pk: int | None
    duplicate: bool
    links: list[Link] = field(default_factory=list)
    learned: list[str] = field(default_factory=list)  # operations that learned their subject
    wakes: list[tuple[str, int]] = field(default_factory=list)  # (operation id, fence)
    # (provider, reason) of each new link whose event cannot count for its operation
    # (``shared.intake.ignored``), counted in the metrics after commit
    ignored: list[tuple[str, str]] = field(default_factory=list)

    @property
    def late(self) -> list[str]:
        """Final operations that this event was linked to (late evidence)."""
        return sorted({link.operation_id for link in self.links if link.final})

    @property
    def to_wake(self) -> list[str]:
        """Open operations strongly correlated with the event (a weak link wakes nothing)."""
        return sorted(
            {
                link.operation_id
                for link in self.links
                if not link.final and link.assurance == STRONG
            }
        )
