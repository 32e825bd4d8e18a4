"""The intake's correlate messages: one per request made before a send began, at most one per
interval, and at once after a quiet spell (no broker: the sender is a recorder)."""

from __future__ import annotations

import itertools
import logging
import threading
import time

import pytest

from services.ingress.intake.correlate_messages import _CorrelationRequests


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.starts: list[float] = []
        self.fail = fail
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            self.starts.append(time.monotonic())
        if self.fail:
            raise ConnectionError("broker down")


def test_a_stream_of_requests_sends_one_message_per_interval_and_covers_the_last() -> None:
    sent = Recorder()
    requests = _CorrelationRequests(send=sent, interval_s=0.05)
    asked: list[float] = []
    deadline = time.monotonic() + 0.4
    while time.monotonic() < deadline:  # a batch every 2 ms, as under load
        asked.append(time.monotonic())
        requests.request()
        time.sleep(0.002)
    assert requests.wait_idle(5)
    starts = sent.starts
    # no two sends closer than the interval (about 0.4 / 0.05 + 1 of them, not one per batch)
    assert all(b - a >= 0.05 for a, b in itertools.pairwise(starts))
    assert 2 <= len(starts) <= 10 < len(asked)
    # the last request is covered by a send that began after it
    assert starts[-1] >= asked[-1]


def test_a_request_after_a_quiet_spell_is_sent_at_once() -> None:
    sent = Recorder()
    requests = _CorrelationRequests(send=sent, interval_s=30.0)
    asked = time.monotonic()
    requests.request()
    assert requests.wait_idle(5)  # well before the 30 s interval
    assert len(sent.starts) == 1
    assert sent.starts[0] >= asked


def test_a_failed_send_is_logged_and_the_requests_go_idle(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sent = Recorder(fail=True)
    requests = _CorrelationRequests(send=sent, interval_s=0.01)
    with caplog.at_level(logging.WARNING, logger="services.ingress.intake.correlate_messages"):
        requests.request()
        assert requests.wait_idle(5)
        requests.request()
        assert requests.wait_idle(5)
    assert len(sent.starts) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "webhook intake: correlate message not sent"
    ] * 2
