"""The in-process token bucket: reservations queue callers at the configured rate."""

from __future__ import annotations

import pytest

from shared.runtime.ratelimit import LocalTokenBucket, wait_for_token


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_full_bucket_serves_a_burst_then_spaces_callers_at_the_rate() -> None:
    clock = FakeClock()
    bucket = LocalTokenBucket(clock=clock)
    waits = [bucket.reserve("conn_1", rate_per_s=25) for _ in range(30)]
    assert waits[:25] == [0.0] * 25
    assert waits[25:] == pytest.approx([0.04, 0.08, 0.12, 0.16, 0.20])


def test_the_bucket_refills_with_time_and_never_beyond_its_size() -> None:
    clock = FakeClock()
    bucket = LocalTokenBucket(clock=clock)
    for _ in range(5):
        bucket.reserve("c", rate_per_s=5)
    assert bucket.reserve("c", rate_per_s=5) == pytest.approx(0.2)
    clock.now += 100.0
    assert [bucket.reserve("c", rate_per_s=5) for _ in range(5)] == [0.0] * 5
    assert bucket.reserve("c", rate_per_s=5) > 0


def test_buckets_are_per_key() -> None:
    bucket = LocalTokenBucket(clock=FakeClock())
    assert bucket.reserve("a", rate_per_s=1) == 0.0
    assert bucket.reserve("a", rate_per_s=1) == pytest.approx(1.0)
    assert bucket.reserve("b", rate_per_s=1) == 0.0


def test_wait_for_token_sleeps_the_reserved_time_and_never_fails() -> None:
    bucket = LocalTokenBucket(clock=FakeClock())
    slept: list[float] = []
    for _ in range(3):
        wait_for_token(bucket, "k", rate_per_s=1, sleep=slept.append)
    assert slept == pytest.approx([1.0, 2.0])


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        LocalTokenBucket().reserve("k", rate_per_s=0)
