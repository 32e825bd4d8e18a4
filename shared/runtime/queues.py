"""The names of Provely's tasks and queues, and the bounds of its messages, without the Celery
application: a sender imports these without building the app (``celery_app`` does that, once,
in the processes that send or serve)."""

from __future__ import annotations

__all__ = [
    "CORRELATE_QUEUE",
    "CORRELATE_TASK",
    "EVALUATE_TASK",
    "MAX_COUNTDOWN_S",
    "OBSERVE_MANY_TASK",
    "OBSERVE_QUEUE",
    "OBSERVE_TASK",
    "VERDICT_QUEUE",
    "WAKES_PER_MESSAGE",
]

OBSERVE_TASK = "provely.observe"
OBSERVE_MANY_TASK = "provely.observe_many"
CORRELATE_TASK = "provely.correlate"
EVALUATE_TASK = "provely.evaluate"
OBSERVE_QUEUE = "observe"
CORRELATE_QUEUE = "correlate"
VERDICT_QUEUE = "verdict"

WAKES_PER_MESSAGE = 16
"""Most wakes one ``provely.observe_many`` message carries: a message costs its sender about as
much as the correlation of one event, and one observer process reads them all at once."""

MAX_COUNTDOWN_S = 60.0
"""The longest countdown put on a message (the longest wait of the shipped contracts' polling).
A later observation is sent by the sweeper when it comes due. A worker holds every countdown
message it has taken until it is due, so this bounds what the observer keeps in memory to the
observations of the next minute, however many operations wait longer (and keeps any message far
inside the broker's visibility timeout, past which Redis would deliver it twice)."""
