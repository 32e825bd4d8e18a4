"""The ``event_log`` verifier: the provider's list of its own events (Stripe ``GET /v1/events``).

Polled like a readback, with the connection's key, from the second the operation was created,
every page; each event read is handed to the intake exactly as a delivery would be (stored once
per (workspace, provider, event id), correlated, its ignored and escaped copies kept), so the
``webhook`` channels that read those event types reduce it like a delivered one. The channel's
own observation is what the read found (how many events, how many were new to the record).

It observes at E3, the level of the provider's events: an event in the log is the provider's
record under the same id a delivery carries, read over an authenticated connection to the
provider's API. It is not signed per event, so its own reading never supersedes a VERIFIED.
The parameters are the channel's ``event_log`` block (the event types to ask for).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EVENT_LOG", "EventLogTraits"]


@dataclass(frozen=True, slots=True)
class EventLogTraits:
    name: str = "event_log"
    level: str = "E3"
    params: str = "event_log"
    polled: bool = True
    reduces_events: bool = False
    brings_events: bool = True
    signed: bool = False
    monotone: bool = False


EVENT_LOG = EventLogTraits()
