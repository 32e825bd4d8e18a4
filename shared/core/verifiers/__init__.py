"""The verifier port: what the rest of Provely may ask of a channel's verifier.

A channel names its verifier (``verifier:`` in a contract); nothing outside this package and
the verifiers' own readers compares that name. Code that must treat channels differently asks
the verifier a question instead (:class:`~shared.core.verifiers.port.Verifier`): is it read by
the observer's readback task, is its observation a reduction of the provider's stored events,
does it bring provider events to the intake, which parameter block does it take, at which
evidence level does it observe, may it go backwards, are its events signed.

Modules:

- ``port``       the :class:`Verifier` protocol and the registry (``register``, ``verifier_of``)
- ``http``       the readback's traits (reader: ``services.observer.http_verifier``)
- ``webhook``    signed deliveries' traits (reduction: ``shared.evidence.webhooks``)
- ``event_log``  the provider's event log's traits (reader: ``services.observer.event_log``)

Adding a verifier is one module here (its traits) and one line below (its registration), plus
its reader where its I/O belongs. Pure: no I/O, no clock. ``verifier_of`` raises
:class:`~shared.core.ChannelError` for a name no verifier holds.
"""

from __future__ import annotations

from shared.core.verifiers.event_log import EVENT_LOG
from shared.core.verifiers.http import HTTP
from shared.core.verifiers.port import (
    Verifier,
    register,
    registered,
    unregister,
    verifier_named,
    verifier_of,
)
from shared.core.verifiers.webhook import WEBHOOK

__all__ = [
    "Verifier",
    "register",
    "registered",
    "unregister",
    "verifier_named",
    "verifier_of",
]

for _verifier in (HTTP, WEBHOOK, EVENT_LOG):
    register(_verifier)
