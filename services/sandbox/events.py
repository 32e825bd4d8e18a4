"""Events and the webhook deliveries they queue.

An event is recorded with a snapshot of its object and queued once per enabled endpoint that
wants it (times the ``duplicate`` fault); the dispatcher (:mod:`services.sandbox.delivery`)
sends what :meth:`Events.due_deliveries` returns and reports back with
:meth:`Events.record_attempt`, which retries with backoff.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from services.sandbox.objects import new_id, public
from services.sandbox.state import SandboxState

__all__ = ["AUTOMATIC", "Events", "RequestContext"]


@dataclass(frozen=True)
class RequestContext:
    """The API request that causes a change (``None`` ids for the provider's own progress)."""

    request_id: str | None = None
    idempotency_key: str | None = None

    def as_event_request(self) -> dict[str, Any]:
        return {"id": self.request_id, "idempotency_key": self.idempotency_key}


AUTOMATIC = RequestContext()


class Events(SandboxState):
    """Events and their deliveries (a part of :class:`services.sandbox.model.Sandbox`)."""

    def emit(
        self,
        type_: str,
        obj: dict[str, Any],
        ctx: RequestContext,
        *,
        previous: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Record an event with a snapshot of ``obj`` and queue its deliveries."""
        data: dict[str, Any] = {"object": json.loads(json.dumps(self.render(obj)))}
        if previous:
            data["previous_attributes"] = json.loads(json.dumps(previous))
        event: dict[str, Any] = {
            "id": new_id("evt_"),
            "object": "event",
            "api_version": self.faults.api_version or self.settings.api_version,
            "created": self.clock.stamp(),
            "data": data,
            "livemode": False,
            "pending_webhooks": 0,
            "request": ctx.as_event_request(),
            "type": type_,
            "_seq": self._next_seq(),
        }
        self.events[event["id"]] = event
        endpoints = [
            e
            for e in self.webhook_endpoints.values()
            if e["status"] == "enabled"
            and ("*" in e["enabled_events"] or type_ in e["enabled_events"])
        ]
        event["pending_webhooks"] = len(endpoints)
        for endpoint in endpoints:
            self._queue(event, endpoint, copies=self.faults.duplicate)
        return event

    def _queue(
        self, event: dict[str, Any], endpoint: dict[str, Any], *, copies: int, reason: str = "event"
    ) -> list[dict[str, Any]]:
        body = public(event)
        if endpoint["api_version"]:
            body["api_version"] = endpoint["api_version"]
        payload = json.dumps(body, indent=2)
        dropped = event["type"] in self.faults.drop_types
        buffered = self.faults.order != "in_order"
        queued = []
        for copy in range(copies):
            delivery: dict[str, Any] = {
                "id": new_id("dlv_"),
                "event_id": event["id"],
                "event_type": event["type"],
                "endpoint_id": endpoint["id"],
                "url": endpoint["url"],
                "copy": copy + 1,
                "reason": reason,
                "status": "dropped" if dropped else ("buffered" if buffered else "scheduled"),
                "next_attempt_at": None
                if dropped or buffered
                else self.clock.sched() + self.faults.delay_ms / 1000,
                "attempts": [],
                "payload": payload,
                "seq": self._next_seq(),
            }
            self.deliveries[delivery["id"]] = delivery
            queued.append(delivery)
        return queued

    def resend_event(self, event_id: str, endpoint_id: str | None) -> list[dict[str, Any]]:
        """Deliver an existing event again (same id and payload), as Stripe's resend does."""
        event = self.get(self.events, "event", event_id)
        if endpoint_id is not None:
            targets = [self.get(self.webhook_endpoints, "webhook endpoint", endpoint_id)]
        else:
            targets = [
                e
                for e in self.webhook_endpoints.values()
                if "*" in e["enabled_events"] or event["type"] in e["enabled_events"]
            ]
        queued: list[dict[str, Any]] = []
        for endpoint in targets:
            queued.extend(self._queue(event, endpoint, copies=1, reason="resend"))
        return queued

    def release(self) -> list[str]:
        """Schedule buffered deliveries now, in the order the ``order`` fault names."""
        buffered = sorted(
            (d for d in self.deliveries.values() if d["status"] == "buffered"),
            key=lambda d: d["seq"],
        )
        if self.faults.order == "reversed":
            buffered.reverse()
        elif self.faults.order == "shuffled":
            random.Random(self.faults.shuffle_seed).shuffle(buffered)
        now = self.clock.sched() + self.faults.delay_ms / 1000
        for delivery in buffered:
            delivery["status"] = "scheduled"
            delivery["next_attempt_at"] = now
            delivery["seq"] = self._next_seq()
        return [d["id"] for d in buffered]

    def due_deliveries(self) -> list[dict[str, Any]]:
        """Scheduled deliveries whose time has come, oldest first; marked ``sending``."""
        now = self.clock.sched()
        due = sorted(
            (
                d
                for d in self.deliveries.values()
                if d["status"] == "scheduled" and d["next_attempt_at"] <= now
            ),
            key=lambda d: (d["next_attempt_at"], d["seq"]),
        )
        for delivery in due:
            delivery["status"] = "sending"
        return due

    def signing_secret(self, delivery: dict[str, Any]) -> str | None:
        endpoint = self.webhook_endpoints.get(delivery["endpoint_id"])
        if endpoint is None or endpoint["status"] != "enabled":
            return None
        secret: str = endpoint["secret"]
        return secret

    def record_attempt(
        self,
        delivery: dict[str, Any],
        *,
        status_code: int | None,
        error: str | None,
        duration_ms: int,
    ) -> None:
        """Note one attempt; a non-2xx answer is retried with backoff until the attempts run out."""
        if delivery["id"] not in self.deliveries:  # the sandbox was reset meanwhile
            return
        now = self.clock.sched()
        delivery["attempts"].append(
            {
                "at": self.clock.stamp(),
                "status_code": status_code,
                "error": error,
                "duration_ms": duration_ms,
            }
        )
        if status_code is not None and 200 <= status_code < 300:
            delivery["status"], delivery["next_attempt_at"] = "delivered", None
            return
        tried = len(delivery["attempts"])
        if tried >= self.settings.retry_max_attempts:
            delivery["status"], delivery["next_attempt_at"] = "failed", None
            return
        wait_ms = min(self.settings.retry_max_ms, self.settings.retry_base_ms * 2 ** (tried - 1))
        delivery["status"], delivery["next_attempt_at"] = "scheduled", now + wait_ms / 1000

    def cancel_delivery(self, delivery: dict[str, Any]) -> None:
        delivery["status"], delivery["next_attempt_at"] = "canceled", None
