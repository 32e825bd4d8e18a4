"""The intake's ``provely.correlate`` messages: after a batch that stored new events commits,
:data:`correlation_requests` asks for its events from a thread of the process, coalesced (at
once after a quiet spell, at most one per ``MIN_SEND_INTERVAL_S`` under a stream of batches).
The correlator that a message starts takes every pending event
(``shared.intake.correlator``); a lost message loses nothing (the sweeper correlates what is
still pending after its grace).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from shared.lifecycle import messages

__all__ = ["MIN_SEND_INTERVAL_S", "correlation_requests"]

log = logging.getLogger(__name__)


MIN_SEND_INTERVAL_S = 0.1
"""Under a stream of batches, at most one correlate message per this many seconds."""


def _send_correlate() -> None:
    messages.correlate()


class _CorrelationRequests:
    """Sends ``provely.correlate`` messages from a thread of its own, coalesced.

    A batch that stored new events calls :meth:`request` after its commit and is answered at
    once. The thread sends one message for every request made before the send began: whatever
    committed before a request is visible to the correlator that message starts, so no batch
    waits for the broker and a burst of batches costs one message. Sends are at least
    ``interval_s`` apart: a request after a quiet spell is sent at once, and under a stream of
    batches the next message waits for the interval, so the correlator takes the events of all
    the batches committed meanwhile in one transaction. (When the thread only waited after a
    send that a request had overlapped, it sent a message for most batches: 27 a second at 1,900
    deliveries a second, against 10 now, and correlating 70 events per transaction instead of
    190 cost the correlator about 50 µs more CPU per event, and its database about 40.) A failed
    send is logged; the sweeper correlates what is left pending.
    """

    def __init__(
        self,
        send: Callable[[], object] = _send_correlate,
        interval_s: float = MIN_SEND_INTERVAL_S,
    ) -> None:
        self._send = send
        self._interval_s = interval_s
        self._wanted = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def request(self) -> None:
        with self._lock:
            self._idle.clear()
            self._wanted.set()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="provely-correlate-requests", daemon=True
                )
                self._thread.start()

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        """True once every request made so far has had its message sent (or failed)."""
        return self._idle.wait(timeout_s)

    def _run(self) -> None:
        last = time.monotonic() - self._interval_s
        while True:
            self._wanted.wait()
            time.sleep(max(0.0, self._interval_s - (time.monotonic() - last)))
            with self._lock:
                self._wanted.clear()
            try:
                self._send()
            except Exception:
                log.warning("webhook intake: correlate message not sent", exc_info=True)
            # Counted from the end of the send: two sends are the interval apart wherever in
            # them one looks (from its start, a slow send let the next begin sooner after it).
            last = time.monotonic()
            with self._lock:
                if not self._wanted.is_set():
                    self._idle.set()


correlation_requests = _CorrelationRequests()
