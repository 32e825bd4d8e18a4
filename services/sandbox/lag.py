"""Provider read lag: the refund readbacks served from an older state, as a read replica does.

Stripe's reads can lag behind its writes for a moment. With a lag of *L* seconds (the fault
``read_lag_ms`` for every refund, or ``/_sandbox/refunds/{id}/read_lag`` for one), a readback
of a refund (``GET /v1/refunds/{id}``) and the list of refunds (``GET /v1/refunds``) show each
refund as it was *L* seconds ago on the sandbox's scheduling clock: not found (and not listed)
before it existed then, an older status after it moved. Writes, events and deliveries are not
delayed: a webhook can say ``failed`` while the readback still says ``succeeded``. Setting the
lag while a refund is already readable makes the next readbacks go backwards — the case a
verifier must not take for the provider's answer.

Every state a refund takes is remembered with the moment it took it (:meth:`remember_refund`);
a refund with no remembered state (loaded from a state file) is always shown as it is.
"""

from __future__ import annotations

import copy
from typing import Any

from services.sandbox import params as rules
from services.sandbox.errors import StripeError
from services.sandbox.events import Events

__all__ = ["ReadLag"]


class ReadLag(Events):
    """The lagging view of refunds (a part of :class:`services.sandbox.model.Sandbox`)."""

    def reset(self, *, keep_faults: bool = False) -> None:
        super().reset(keep_faults=keep_faults)
        self.refund_states: dict[str, list[tuple[float, dict[str, Any]]]] = {}
        self.refund_lags_ms: dict[str, int] = {}

    def remember_refund(self, refund: dict[str, Any]) -> None:
        """Record the state ``refund`` has now (after each change)."""
        states = self.refund_states.setdefault(refund["id"], [])
        states.append((self.clock.sched(), copy.deepcopy(refund)))

    def set_refund_read_lag(self, ident: str, ms: int) -> dict[str, Any]:
        """Serve the readbacks of one refund ``ms`` behind (0: the global fault again)."""
        self.get(self.refunds, "refund", ident)
        if ms < 0:
            raise StripeError(400, "ms must not be negative.")
        if ms:
            self.refund_lags_ms[ident] = ms
        else:
            self.refund_lags_ms.pop(ident, None)
        return {"refund": ident, "read_lag_ms": self.read_lag_ms(ident)}

    def read_lag_ms(self, ident: str) -> int:
        return self.refund_lags_ms.get(ident, self.faults.read_lag_ms)

    def lagged_refund(self, refund: dict[str, Any]) -> dict[str, Any] | None:
        """``refund`` as a lagging read shows it; None when it did not exist yet then."""
        lag = self.read_lag_ms(refund["id"])
        states = self.refund_states.get(refund["id"])
        if not lag or not states:
            return refund
        seen_at = self.clock.sched() - lag / 1000.0
        shown = None
        for at, state in states:
            if at > seen_at:
                break
            shown = state
        return shown

    def read_refund(self, ident: str) -> dict[str, Any]:
        """``GET /v1/refunds/{id}`` through the lagging view."""
        refund = self.lagged_refund(self.get(self.refunds, "refund", ident))
        if refund is None:
            raise rules.missing("refund", ident)
        return refund

    def readable_refunds(self) -> list[dict[str, Any]]:
        """The refunds a list request sees through the lagging view."""
        shown = (self.lagged_refund(r) for r in self.refunds.values())
        return [r for r in shown if r is not None]
