"""The sandbox's provider model: one :class:`Sandbox` of every resource it keeps.

Everything here is plain data (JSON-able dicts) mutated by :class:`Sandbox` methods. Nothing here
does network I/O: the HTTP layer (:mod:`services.sandbox.stripe`) parses requests and calls these
methods, the dispatcher (:mod:`services.sandbox.delivery`) sends what :meth:`Sandbox.due_deliveries`
returns and reports back with :meth:`Sandbox.record_attempt`.

The methods live with their resource: :mod:`~services.sandbox.state` (tables, reset, the
``--state`` format, lookup, rendering, clock controls), :mod:`~services.sandbox.listing` (lists),
:mod:`~services.sandbox.events` (events, deliveries), :mod:`~services.sandbox.endpoints` (webhook
endpoints), :mod:`~services.sandbox.charges`, :mod:`~services.sandbox.refunds` (refunds and their
lifecycle), :mod:`~services.sandbox.checkout` (checkout sessions) and
:mod:`~services.sandbox.balance` (balance transactions and the balance, derived).
"""

from __future__ import annotations

from services.sandbox.balance import Balances
from services.sandbox.checkout import CheckoutSessions
from services.sandbox.endpoints import WebhookEndpoints
from services.sandbox.listing import Listings
from services.sandbox.refunds import Refunds

__all__ = ["Sandbox"]


class Sandbox(CheckoutSessions, Refunds, WebhookEndpoints, Listings, Balances):
    """All provider state and every operation on it. Not thread-safe: one event loop owns it."""
