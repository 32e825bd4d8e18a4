"""The ``http`` verifier: a readback of the provider's current state (evidence level E2).

The reader is ``services.observer.http_verifier``; the parameters are the channel's ``http``
block (method, path template, query, paging). A readback is polled on the contract's schedule,
reads state that a lagging replica may show going backwards, and is not signed per reading.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HTTP", "HttpTraits"]


@dataclass(frozen=True, slots=True)
class HttpTraits:
    name: str = "http"
    level: str = "E2"
    params: str = "http"
    polled: bool = True
    reduces_events: bool = False
    brings_events: bool = False
    signed: bool = False
    monotone: bool = True


HTTP = HttpTraits()
