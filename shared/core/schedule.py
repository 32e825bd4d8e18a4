"""The observation schedule: how long to wait before each observation of an operation.

This module owns :func:`next_observation_delay` and :func:`apply_jitter`. Every number comes
from the contract's ``timing``; none lives here. Observation 1 waits ``initial_delay_ms``
after the action is accepted; observation ``n ≥ 2`` waits
``min(backoff.max_ms, poll_interval_ms * factor**(n-2))`` (a constant backoff waits
``poll_interval_ms``, still capped by ``max_ms``). Past ``max_attempts`` there is no next
observation (``None``): the operation stays open for callbacks until its deadline.

For the Stripe contracts: 1000, 5000, 10000, 20000, 40000, 60000, 60000 … ms, 40 in all.
"""

from __future__ import annotations

from shared.core import ScheduleError
from shared.core.contract import Timing

__all__ = ["MAX_JITTER_RATIO", "apply_jitter", "next_observation_delay", "recheck_delay"]

MAX_JITTER_RATIO = 0.1


def next_observation_delay(timing: Timing, n: int) -> int | None:
    """Milliseconds to wait before observation ``n`` (1-based); ``None`` past the last one."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ScheduleError(f"observation number must be an integer >= 1, got {n!r}")
    if n > timing.max_attempts:
        return None
    if n == 1:
        return timing.initial_delay_ms
    cap = timing.backoff.max_ms
    delay: float = timing.poll_interval_ms
    if timing.backoff.kind == "exponential":
        factor = timing.backoff.factor
        for _ in range(n - 2):
            if delay >= cap:
                break
            delay *= factor
    return int(min(cap, delay))


def recheck_delay(timing: Timing, n: int) -> int:
    """Milliseconds before try ``n`` + 1 of a recheck whose try ``n`` (1-based) could not read:
    the polling backoff from ``poll_interval_ms`` (times ``factor`` each try, at most
    ``backoff.max_ms``); unlike polling it never runs out (the watch bounds it)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ScheduleError(f"recheck number must be an integer >= 1, got {n!r}")
    cap = timing.backoff.max_ms
    delay: float = timing.poll_interval_ms
    if timing.backoff.kind == "exponential":
        for _ in range(n - 1):
            if delay >= cap:
                break
            delay *= timing.backoff.factor
    return int(min(cap, delay))


def apply_jitter(ms: int, ratio: float, u: float) -> int:
    """Lengthen ``ms`` by ``ratio * u`` of itself (never shortens; ``ratio`` ≤ 10 %).

    ``u`` is a uniform draw in ``[0, 1)`` made by the caller (the core draws no randomness);
    tests pass ``ratio=0``.
    """
    if not 0 <= ratio <= MAX_JITTER_RATIO:
        raise ScheduleError(f"jitter ratio must be within [0, {MAX_JITTER_RATIO}], got {ratio}")
    if not 0 <= u < 1:
        raise ScheduleError(f"jitter draw must be within [0, 1), got {u}")
    if ms < 0:
        raise ScheduleError(f"a wait cannot be negative, got {ms}")
    return ms + int(ms * ratio * u)
