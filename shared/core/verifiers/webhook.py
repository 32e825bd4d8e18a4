"""The ``webhook`` verifier: the provider's signed events of one operation (evidence level E3).

Deliveries are verified and stored by the intake; the channel's observation is the reduction
of the stored events (``shared.core.events``, loaded by ``shared.evidence.webhooks``) made when
an observation is stored. The parameters are the channel's ``webhook`` block.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WEBHOOK", "WebhookTraits"]


@dataclass(frozen=True, slots=True)
class WebhookTraits:
    name: str = "webhook"
    level: str = "E3"
    params: str = "webhook"
    polled: bool = False
    reduces_events: bool = True
    brings_events: bool = True
    signed: bool = True
    monotone: bool = False


WEBHOOK = WebhookTraits()
