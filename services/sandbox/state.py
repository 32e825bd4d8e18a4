"""The sandbox's state: its tables, reset, the ``--state`` format, lookup and rendering.

:class:`SandboxState` is the base of :class:`services.sandbox.model.Sandbox`: the tables of
plain data the operations change (charges, refunds, events, deliveries, …), the sequence that
orders them, the sandbox clock and its controls (advance, outage), and how a stored object is
found and rendered.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from services.sandbox import params as rules
from services.sandbox.clock import Clock
from services.sandbox.errors import StateFileError, StripeError
from services.sandbox.objects import public
from services.sandbox.settings import Faults, SandboxSettings
from services.sandbox.shapes import complete

__all__ = ["STATE_FORMAT", "SandboxState"]

STATE_FORMAT = 1


class SandboxState:
    """All provider state. Not thread-safe: one event loop owns it."""

    def __init__(
        self, settings: SandboxSettings | None = None, *, wall: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings or SandboxSettings()
        self.clock = Clock(self, wall)
        self.faults = Faults()
        self.advanced_s = 0.0
        self._listeners: list[Callable[[], None]] = []
        self.reset()

    # ----------------------------------------------------------------- state
    def reset(self, *, keep_faults: bool = False) -> None:
        self.charges: dict[str, dict[str, Any]] = {}
        self.refunds: dict[str, dict[str, Any]] = {}
        self.payment_intents: dict[str, dict[str, Any]] = {}
        self.checkout_sessions: dict[str, dict[str, Any]] = {}
        self.customers: dict[str, dict[str, Any]] = {}
        self.webhook_endpoints: dict[str, dict[str, Any]] = {}
        self.events: dict[str, dict[str, Any]] = {}
        self.deliveries: dict[str, dict[str, Any]] = {}
        self.transitions: list[dict[str, Any]] = []
        self.idempotency: dict[str, dict[str, Any]] = {}
        self.seq = 0
        self.advanced_s = 0.0
        if not keep_faults:
            self.faults = Faults()

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def dump(self) -> dict[str, Any]:
        """Everything, JSON-able (the ``--state`` file format)."""
        return {
            "format": STATE_FORMAT,
            "seq": self.seq,
            "advanced_s": self.advanced_s,
            "faults": self.faults.model_dump(),
            "charges": self.charges,
            "refunds": self.refunds,
            "payment_intents": self.payment_intents,
            "checkout_sessions": self.checkout_sessions,
            "customers": self.customers,
            "webhook_endpoints": self.webhook_endpoints,
            "events": self.events,
            "deliveries": self.deliveries,
            "transitions": self.transitions,
            "idempotency": self.idempotency,
        }

    def load(self, data: Any) -> None:
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            raise StateFileError(f"not a sandbox state file of format {STATE_FORMAT}")
        try:
            self.faults = Faults.model_validate(data["faults"])
            self.seq = int(data["seq"])
            self.advanced_s = float(data["advanced_s"])
            for name in (
                "charges",
                "refunds",
                "payment_intents",
                "checkout_sessions",
                "webhook_endpoints",
                "events",
                "deliveries",
                "idempotency",
            ):
                value = data[name]
                if not isinstance(value, dict):
                    raise StateFileError(f"{name} is not an object")
                setattr(self, name, value)
            # Added later: a state file written before customers existed has none.
            customers = data.get("customers", {})
            if not isinstance(customers, dict):
                raise StateFileError("customers is not an object")
            self.customers = customers
            transitions = data["transitions"]
            if not isinstance(transitions, list):
                raise StateFileError("transitions is not a list")
            self.transitions = transitions
        except (KeyError, TypeError, ValueError) as exc:
            raise StateFileError(f"incomplete sandbox state: {exc}") from exc
        # A delivery that was on the wire when the process stopped is sent again.
        for delivery in self.deliveries.values():
            if delivery["status"] == "sending":
                delivery["status"] = "scheduled"

    def get(self, table: dict[str, dict[str, Any]], kind: str, ident: str) -> dict[str, Any]:
        obj = table.get(ident)
        if obj is None:
            raise rules.missing(kind, ident)
        return obj

    def render(self, obj: dict[str, Any]) -> dict[str, Any]:
        out = complete(public(obj))
        if obj.get("object") == "event":
            out["pending_webhooks"] = self._pending_webhooks(obj["id"])
        if obj.get("object") == "webhook_endpoint":
            out.pop("secret", None)
        return out

    def _pending_webhooks(self, event_id: str) -> int:
        return len(
            {
                d["endpoint_id"]
                for d in self.deliveries.values()
                if d["event_id"] == event_id and d["status"] in ("scheduled", "buffered", "sending")
            }
        )

    # ------------------------------------------------------------------- clock
    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise StripeError(400, "seconds must not be negative.")
        self.advanced_s += seconds

    def in_outage(self) -> bool:
        until = self.faults.outage_until
        return until is not None and self.clock.sched() < until
