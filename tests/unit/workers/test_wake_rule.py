"""``message_pending``: when a wake may keep the observe message already sent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from shared.lifecycle.scheduling import message_pending

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def test_a_due_message_that_no_observer_has_claimed_is_pending() -> None:
    assert message_pending(due=NOW, enqueued_at=NOW, fence=3, reading_fence=2, now=NOW)
    assert message_pending(
        due=NOW - S, enqueued_at=NOW - 9 * S, fence=1, reading_fence=None, now=NOW
    )


def test_a_claimed_fence_may_have_been_read_before_the_event() -> None:
    assert not message_pending(due=NOW - S, enqueued_at=NOW - S, fence=3, reading_fence=3, now=NOW)


def test_no_message_or_no_due_observation_is_nothing_to_keep() -> None:
    assert not message_pending(due=None, enqueued_at=NOW, fence=2, reading_fence=1, now=NOW)
    assert not message_pending(due=NOW, enqueued_at=None, fence=2, reading_fence=1, now=NOW)
    assert not message_pending(
        due=NOW + timedelta(milliseconds=1), enqueued_at=NOW, fence=2, reading_fence=1, now=NOW
    )


@given(
    due=st.none() | st.integers(-100_000, 100_000),
    sent=st.none() | st.integers(-100_000, 100_000),
    fence=st.integers(0, 50),
    claimed=st.none() | st.integers(0, 50),
)
def test_kept_only_when_due_sent_and_unclaimed(
    due: int | None, sent: int | None, fence: int, claimed: int | None
) -> None:
    ms = timedelta(milliseconds=1)
    kept = message_pending(
        due=None if due is None else NOW + due * ms,
        enqueued_at=None if sent is None else NOW + sent * ms,
        fence=fence,
        reading_fence=claimed,
        now=NOW,
    )
    unclaimed = claimed is None or claimed < fence
    assert kept == (due is not None and due <= 0 and sent is not None and unclaimed)
