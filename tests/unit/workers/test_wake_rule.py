"""``message_reads_after``: when a wake may keep the observe message already sent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from shared.scheduling import WAKE_CLOCK_MARGIN, message_reads_after

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def test_a_due_message_sent_a_margin_after_the_event_reads_after_it() -> None:
    sent = NOW - 2 * S
    assert message_reads_after(
        due=NOW, enqueued_at=sent, received_at=sent - WAKE_CLOCK_MARGIN, now=NOW
    )
    assert message_reads_after(due=NOW - S, enqueued_at=sent, received_at=sent - 9 * S, now=NOW)


def test_within_the_margin_or_later_the_event_may_be_missed() -> None:
    sent = NOW - 2 * S
    just_inside = sent - WAKE_CLOCK_MARGIN + timedelta(microseconds=1)
    assert not message_reads_after(due=NOW, enqueued_at=sent, received_at=just_inside, now=NOW)
    assert not message_reads_after(due=NOW, enqueued_at=sent, received_at=NOW, now=NOW)


def test_no_message_or_no_due_observation_is_nothing_to_keep() -> None:
    early = NOW - 60 * S
    assert not message_reads_after(due=None, enqueued_at=NOW, received_at=early, now=NOW)
    assert not message_reads_after(due=NOW, enqueued_at=None, received_at=early, now=NOW)
    assert not message_reads_after(
        due=NOW + timedelta(milliseconds=1), enqueued_at=NOW, received_at=early, now=NOW
    )


@given(
    due=st.integers(-100_000, 100_000),
    sent=st.integers(-100_000, 100_000),
    received=st.integers(-100_000, 100_000),
)
def test_kept_only_when_due_and_sent_after_arrival(due: int, sent: int, received: int) -> None:
    ms = timedelta(milliseconds=1)
    kept = message_reads_after(
        due=NOW + due * ms, enqueued_at=NOW + sent * ms, received_at=NOW + received * ms, now=NOW
    )
    assert kept == (due <= 0 and NOW + received * ms + WAKE_CLOCK_MARGIN <= NOW + sent * ms)
