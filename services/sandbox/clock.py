"""The sandbox clock.

A *scheduling* clock (wall time plus the seconds added by "advance") drives settlement,
delivery delays and retries; the *provider* clock (scheduling clock plus the clock-offset fault)
stamps ``created`` fields; signatures carry wall time plus the offset (advancing is a way to skip
waiting, the offset is the skew fault).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from services.sandbox.settings import Faults

__all__ = ["Clock"]


class _SandboxTime(Protocol):
    """What the clock reads of the sandbox: the seconds advanced and the clock-offset fault."""

    advanced_s: float
    faults: Faults


class Clock:
    """Scheduling clock = wall + advanced seconds; provider clock = scheduling + offset."""

    def __init__(self, sandbox: _SandboxTime, wall: Callable[[], float] = time.time) -> None:
        self._sandbox = sandbox
        self._wall = wall

    def sched(self) -> float:
        return self._wall() + self._sandbox.advanced_s

    def stamp(self) -> int:
        return int(self.sched() + self._sandbox.faults.clock_offset_s)

    def signing_stamp(self) -> int:
        """``t=`` of a signature: wall time plus the offset fault, never the advanced seconds,
        so that skipping ahead in a test does not make receivers refuse deliveries."""
        return int(self._wall() + self._sandbox.faults.clock_offset_s)
