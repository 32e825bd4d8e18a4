"""The MCP server over streamable HTTP at ``/mcp``: on its own (``provely mcp --transport
http``, :func:`create_http_app`) or mounted in front of the ingress (``provely serve ingress
--mcp``, :func:`mount_mcp`: ``/mcp`` goes to the MCP server, everything else to the API).

Each request must carry a workspace API key (``Authorization: Bearer pv_…``): without one it
is answered 401 before the MCP SDK sees it, and the key goes with every API call the tools
make, so the API authenticates it and scopes every answer to its workspace. The SDK's
DNS-rebinding checks are on: only the ``Host`` and ``Origin`` values given are accepted.
"""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager

from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

from services.mcp_server.server import build_server

__all__ = ["MCP_PATH", "RequireApiKey", "create_http_app", "mount_mcp"]

MCP_PATH = "/mcp"


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


def _mcp_app(*, api_url: str, allowed_hosts: list[str]) -> Starlette:
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=allowed_hosts,
        allowed_origins=[f"http://{host}" for host in allowed_hosts],
    )
    server = build_server(api_url=api_url, api_key=None)
    return server.streamable_http_app(
        streamable_http_path=MCP_PATH, transport_security=security, stateless_http=True
    )


def create_http_app(*, api_url: str, allowed_hosts: list[str]) -> ASGIApp:
    """The streamable HTTP app; ``allowed_hosts`` are ``host:port`` values (``Host`` header)."""
    return RequireApiKey(_mcp_app(api_url=api_url, allowed_hosts=allowed_hosts))


class _Mounted:
    """``/mcp`` to the MCP app, the rest to ``app``; the lifespan runs the MCP app's session
    manager around ``app``'s own lifespan."""

    def __init__(self, app: ASGIApp, mcp: Starlette) -> None:
        self.app = app
        self.mcp = mcp
        self.guarded = RequireApiKey(mcp)

    def _mcp_lifespan(self) -> AbstractAsyncContextManager[object]:
        return self.mcp.router.lifespan_context(self.mcp)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            async with self._mcp_lifespan():
                await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if scope["type"] == "http" and (path == MCP_PATH or path.startswith(MCP_PATH + "/")):
            await self.guarded(scope, receive, send)
            return
        await self.app(scope, receive, send)


def mount_mcp(app: ASGIApp, *, api_url: str, allowed_hosts: list[str]) -> ASGIApp:
    """``app`` (the ingress) with the MCP server at ``/mcp``, whose tools call ``api_url``."""
    return _Mounted(app, _mcp_app(api_url=api_url, allowed_hosts=allowed_hosts))
