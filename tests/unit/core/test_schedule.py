"""The observation schedule and jitter."""

from __future__ import annotations

from typing import Any

import pytest

from shared.core import ScheduleError
from shared.core.contract import Timing
from shared.core.schedule import MAX_JITTER_RATIO, apply_jitter, next_observation_delay
from tests.unit.core.builders import load

STRIPE = load().timing


def test_stripe_schedule_is_1_5_10_20_40_60_then_60_and_stops_at_40() -> None:
    delays = [next_observation_delay(STRIPE, n) for n in range(1, 42)]
    assert delays[:8] == [1000, 5000, 10000, 20000, 40000, 60000, 60000, 60000]
    assert all(d == 60000 for d in delays[5:40])
    assert len([d for d in delays if d is not None]) == 40
    assert delays[40] is None
    assert next_observation_delay(STRIPE, 10_000) is None


def _timing(**changes: Any) -> Timing:
    document = STRIPE.model_dump(mode="json")
    document.update(changes)
    return Timing.model_validate(document)


@pytest.mark.parametrize(
    ("backoff", "expected"),
    [
        ({"kind": "constant", "max_ms": 60000}, [1000, 5000, 5000, 5000]),
        ({"kind": "constant", "max_ms": 3000}, [1000, 3000, 3000, 3000]),
        ({"kind": "exponential", "factor": 1.5, "max_ms": 10000}, [1000, 5000, 7500, 10000]),
        ({"kind": "exponential", "factor": 1, "max_ms": 60000}, [1000, 5000, 5000, 5000]),
    ],
)
def test_other_backoffs(backoff: dict[str, Any], expected: list[int]) -> None:
    timing = _timing(backoff=backoff)
    assert [next_observation_delay(timing, n) for n in range(1, 5)] == expected


def test_large_attempt_numbers_do_not_overflow() -> None:
    timing = _timing(max_attempts=100_000)
    assert next_observation_delay(timing, 100_000) == 60000


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "2"])
def test_bad_observation_numbers_raise(n: Any) -> None:
    with pytest.raises(ScheduleError):
        next_observation_delay(STRIPE, n)


@pytest.mark.parametrize(
    ("ms", "ratio", "u", "expected"),
    [
        (5000, 0.0, 0.99, 5000),
        (5000, 0.1, 0.0, 5000),
        (5000, 0.1, 0.5, 5250),
        (5000, 0.1, 0.999999, 5499),
        (0, 0.1, 0.5, 0),
    ],
)
def test_jitter_only_lengthens_by_at_most_ten_percent(
    ms: int, ratio: float, u: float, expected: int
) -> None:
    assert apply_jitter(ms, ratio, u) == expected
    assert ms <= apply_jitter(ms, ratio, u) <= ms * (1 + MAX_JITTER_RATIO)


@pytest.mark.parametrize(
    ("ms", "ratio", "u"),
    [(1, -0.1, 0.5), (1, 0.11, 0.5), (1, 0.1, 1.0), (1, 0.1, -0.1), (-1, 0, 0)],
)
def test_bad_jitter_arguments_raise(ms: int, ratio: float, u: float) -> None:
    with pytest.raises(ScheduleError):
        apply_jitter(ms, ratio, u)
