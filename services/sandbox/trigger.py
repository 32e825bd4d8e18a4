"""``provely sandbox trigger EVENT``: create the objects an event needs on a running sandbox.

Like ``stripe trigger``, each event type has a fixture: the API calls (and, where Stripe's own
progress causes the event, the control calls) that make a real sandbox object produce it. A
``refund.updated`` needs a charge, a refund of it, and the refund settling. The calls go
through the sandbox's ``/v1`` API with a test key, so every object and event is as real as one
an app creates; then ``/_sandbox/flush`` sends the deliveries at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = ["FIXTURES", "TriggerError", "Triggered", "trigger"]


class TriggerError(Exception):
    """The sandbox refused a call of the fixture, or cannot be reached."""


@dataclass
class Triggered:
    """What a fixture created (kind → id) and the events the sandbox recorded meanwhile."""

    objects: dict[str, str] = field(default_factory=dict)
    events: list[tuple[str, str]] = field(default_factory=list)


class _Calls:
    def __init__(self, client: httpx.Client, result: Triggered) -> None:
        self.client = client
        self.result = result

    def _answer(self, response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            body = {}
        if response.status_code != 200:
            message = (body.get("error") or {}).get("message") if isinstance(body, dict) else None
            raise TriggerError(
                f"{response.request.method} {response.request.url.path} answered "
                f"{response.status_code}: {message or response.text[:200]}"
            )
        return dict(body)

    def api(self, path: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = self._answer(self.client.post(f"/v1/{path}", data=data or {}))
        if isinstance(answer.get("object"), str) and isinstance(answer.get("id"), str):
            self.result.objects[answer["object"]] = answer["id"]
        return answer

    def control(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._answer(self.client.post(f"/_sandbox/{path}", json=body or {}))


def _charge(c: _Calls, **extra: Any) -> dict[str, Any]:
    return c.api("charges", {"amount": 2000, "currency": "usd", **extra})


def _refund(c: _Calls) -> dict[str, Any]:
    return c.api("refunds", {"charge": _charge(c)["id"]})


def _settled(status: str) -> Callable[[_Calls], None]:
    def fixture(c: _Calls) -> None:
        c.control(f"refunds/{_refund(c)['id']}/status", {"status": status})

    return fixture


def _captured(c: _Calls) -> None:
    c.api(f"charges/{_charge(c, capture='false')['id']}/capture")


def _customer_updated(c: _Calls) -> None:
    customer = c.api("customers", {"name": "Sandbox customer"})
    c.api(f"customers/{customer['id']}", {"name": "Sandbox customer (updated)"})


def _checkout(c: _Calls) -> None:
    done = c.control("checkout/complete", {"amount": 2000, "metadata": {"seats": "1"}})
    for kind in ("checkout_session", "payment_intent", "charge"):
        c.result.objects[done[kind]["object"]] = done[kind]["id"]


#: event type -> fixture; each fixture makes the sandbox emit (at least) that event.
FIXTURES: dict[str, Callable[[_Calls], Any]] = {
    "charge.succeeded": _charge,
    "charge.captured": _captured,
    "charge.refunded": _refund,
    "refund.created": _refund,
    "refund.updated": _settled("succeeded"),
    "refund.failed": _settled("failed"),
    "customer.created": lambda c: c.api("customers", {"name": "Sandbox customer"}),
    "customer.updated": _customer_updated,
    "payment_intent.created": lambda c: c.api(
        "payment_intents", {"amount": 2000, "currency": "usd"}
    ),
    "payment_intent.succeeded": lambda c: c.api(
        "payment_intents",
        {"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": "true"},
    ),
    "checkout.session.completed": _checkout,
}


def _newest_event(client: httpx.Client) -> str | None:
    answer = client.get("/v1/events", params={"limit": 1})
    data = answer.json().get("data") if answer.status_code == 200 else None
    return data[0]["id"] if data else None


def _events_after(client: httpx.Client, newest: str | None) -> list[tuple[str, str]]:
    params: dict[str, Any] = {"limit": 100}
    if newest is not None:
        params["ending_before"] = newest
    answer = client.get("/v1/events", params=params)
    rows = answer.json().get("data", []) if answer.status_code == 200 else []
    return [(e["type"], e["id"]) for e in reversed(rows)]


def trigger(base_url: str, event: str, *, api_key: str, timeout_s: float = 30.0) -> Triggered:
    """Run ``event``'s fixture against the sandbox at ``base_url``; raises ``TriggerError``."""
    fixture = FIXTURES.get(event)
    if fixture is None:
        raise TriggerError(f"no fixture for {event!r}; one of: {', '.join(sorted(FIXTURES))}")
    result = Triggered()
    try:
        with httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout_s,
        ) as client:
            newest = _newest_event(client)
            calls = _Calls(client, result)
            fixture(calls)
            calls.control("flush")
            result.events = _events_after(client, newest)
    except httpx.HTTPError as exc:
        raise TriggerError(f"cannot reach the sandbox at {base_url}: {exc}") from exc
    return result
