"""``provely mcp --transport http``: the MCP server over streamable HTTP at ``/mcp``.

Each request must carry a workspace API key (``Authorization: Bearer pv_…``): without one it
is answered 401 before the MCP SDK sees it, and the key goes with every API call the tools
make, so the API authenticates it and scopes every answer to its workspace. The SDK's
DNS-rebinding checks are on: only the ``Host`` and ``Origin`` values given are accepted.
"""

from __future__ import annotations

import json

from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

from services.mcp_server.server import build_server

__all__ = ["RequireApiKey", "create_http_app"]


class RequireApiKey:
    """Answer 401 (problem+json) to any HTTP request without a Bearer API key."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers", ()))
            scheme, _, key = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
            if scheme.lower() != "bearer" or not key.strip():
                body = json.dumps(
                    {
                        "type": "https://provely.dev/problems/unauthenticated",
                        "title": "Unauthorized",
                        "status": 401,
                        "detail": "send the workspace API key as Authorization: Bearer pv_…",
                    }
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/problem+json"),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def create_http_app(*, api_url: str, allowed_hosts: list[str]) -> ASGIApp:
    """The streamable HTTP app; ``allowed_hosts`` are ``host:port`` values (``Host`` header)."""
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=allowed_hosts,
        allowed_origins=[f"http://{host}" for host in allowed_hosts],
    )
    server = build_server(api_url=api_url, api_key=None)
    app = server.streamable_http_app(
        streamable_http_path="/mcp", transport_security=security, stateless_http=True
    )
    return RequireApiKey(app)
