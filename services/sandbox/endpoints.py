"""Webhook endpoints: where events are delivered, with the secret that signs them."""

from __future__ import annotations

import secrets
from typing import Any

from services.sandbox import params as rules
from services.sandbox.errors import StripeError
from services.sandbox.events import RequestContext
from services.sandbox.objects import new_id
from services.sandbox.state import SandboxState

__all__ = ["WebhookEndpoints"]


class WebhookEndpoints(SandboxState):
    """Webhook endpoints (a part of :class:`services.sandbox.model.Sandbox`)."""

    def create_webhook_endpoint(
        self, params: dict[str, Any], ctx: RequestContext
    ) -> dict[str, Any]:
        rules.check_known(
            params, {"url", "enabled_events", "description", "metadata", "api_version"}
        )
        endpoint: dict[str, Any] = {
            "id": new_id("we_"),
            "object": "webhook_endpoint",
            "api_version": rules.string(params, "api_version"),
            "application": None,
            "created": self.clock.stamp(),
            "description": rules.string(params, "description"),
            "enabled_events": rules.event_types(params.get("enabled_events")),
            "livemode": False,
            "metadata": rules.metadata(params.get("metadata")),
            "secret": "whsec_" + secrets.token_urlsafe(32).replace("-", "a").replace("_", "b"),
            "status": "enabled",
            "url": rules.url(params.get("url")),
            "_seq": self._next_seq(),
        }
        self.webhook_endpoints[endpoint["id"]] = endpoint
        return endpoint

    def update_webhook_endpoint(self, ident: str, params: dict[str, Any]) -> dict[str, Any]:
        rules.check_known(params, {"url", "enabled_events", "description", "metadata", "disabled"})
        endpoint = self.get(self.webhook_endpoints, "webhook endpoint", ident)
        if "url" in params:
            endpoint["url"] = rules.url(params["url"])
        if "enabled_events" in params:
            endpoint["enabled_events"] = rules.event_types(params["enabled_events"])
        if "description" in params:
            endpoint["description"] = rules.string(params, "description")
        if "metadata" in params:
            endpoint["metadata"] = rules.metadata(params["metadata"], endpoint["metadata"])
        if "disabled" in params:
            if params["disabled"] not in ("true", "false"):
                raise StripeError(400, "Invalid boolean: disabled.", param="disabled")
            endpoint["status"] = "disabled" if params["disabled"] == "true" else "enabled"
        return endpoint

    def delete_webhook_endpoint(self, ident: str) -> dict[str, Any]:
        self.get(self.webhook_endpoints, "webhook endpoint", ident)
        del self.webhook_endpoints[ident]
        for delivery in self.deliveries.values():
            if delivery["endpoint_id"] == ident and delivery["status"] in ("scheduled", "buffered"):
                delivery["status"] = "canceled"
        return {"id": ident, "object": "webhook_endpoint", "deleted": True}
