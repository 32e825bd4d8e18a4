"""A small synchronous client of the sandbox's ``/_sandbox`` control API (tests, the demo)."""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["SandboxControl", "SandboxControlError"]


class SandboxControlError(Exception):
    """The control API refused a call (the message is the sandbox's)."""


class SandboxControl:
    """Drive time, outcomes and faults of a running sandbox at ``base_url``.

    Keeps one connection pool: ``close()`` it, or use the client as a context manager."""

    def __init__(self, base_url: str, *, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = httpx.Client(timeout=timeout_s)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> SandboxControl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, **query: Any
    ) -> Any:
        params = {k: v for k, v in query.items() if v is not None}
        response = self._client.request(
            method, f"{self.base_url}/_sandbox/{path}", json=body, params=params
        )
        data = response.json()
        if response.status_code != 200:
            raise SandboxControlError(data.get("error", {}).get("message", response.text))
        return data

    def state(self) -> dict[str, Any]:
        return dict(self._call("GET", "state"))

    def reset(self, *, keep_faults: bool = False) -> None:
        self._call("POST", "reset", {"keep_faults": keep_faults})

    def faults(self, **changes: Any) -> dict[str, Any]:
        """Change the named faults (the others stay); with no argument, read them."""
        if not changes:
            return dict(self._call("GET", "faults"))
        return dict(self._call("POST", "faults", changes))

    def advance(self, seconds: float) -> dict[str, Any]:
        """Move the sandbox clock forward, settle what became due and send due deliveries."""
        return dict(self._call("POST", "advance", {"seconds": seconds}))

    def flush(self) -> dict[str, Any]:
        """Settle and send whatever is due now, waiting for the attempts to finish."""
        return dict(self._call("POST", "flush", {}))

    def outage(self, *, seconds: float | None = None, enabled: bool | None = None) -> None:
        body: dict[str, Any] = {}
        if seconds is not None:
            body["seconds"] = seconds
        if enabled is not None:
            body["enabled"] = enabled
        self._call("POST", "outage", body)

    def release(self) -> list[str]:
        return list(self._call("POST", "release", {})["released"])

    def deliveries(self, **filters: Any) -> list[dict[str, Any]]:
        """Deliveries (with attempts), filtered by event_id, endpoint_id, type or status."""
        return list(self._call("GET", "deliveries", **filters)["data"])

    def resend(self, event_id: str, *, endpoint: str | None = None) -> list[str]:
        return list(
            self._call("POST", f"events/{event_id}/resend", {"endpoint": endpoint})["deliveries"]
        )

    def set_outcome(self, refund_id: str, outcome: str) -> dict[str, Any]:
        return dict(self._call("POST", f"refunds/{refund_id}/outcome", {"outcome": outcome}))

    def set_status(self, refund_id: str, status: str) -> dict[str, Any]:
        return dict(self._call("POST", f"refunds/{refund_id}/status", {"status": status}))

    def complete_checkout(
        self,
        *,
        amount: int,
        currency: str = "usd",
        quantity: int = 1,
        metadata: dict[str, str] | None = None,
        customer: str | None = None,
    ) -> dict[str, Any]:
        """A paid checkout: returns ``{checkout_session, payment_intent, charge}``."""
        body: dict[str, Any] = {
            "amount": amount,
            "currency": currency,
            "quantity": quantity,
            "metadata": metadata or {},
        }
        if customer is not None:
            body["customer"] = customer
        return dict(self._call("POST", "checkout/complete", body))

    def complete_session(self, session_id: str) -> dict[str, Any]:
        return dict(self._call("POST", f"checkout/sessions/{session_id}/complete", {}))

    def delivered(self, **filters: Any) -> list[dict[str, Any]]:
        """Flush (every due delivery gets its attempt), then list the matching deliveries."""
        self.flush()
        return self.deliveries(**filters)
