"""What the SDK and MCP end-to-end tests share: a workspace on a running system with a Stripe
sandbox of its own, a Stripe client on that sandbox, the sandbox's refunds of one charge, and
a proxy that forwards a request to the sandbox and never answers (a Stripe timeout after the
provider acted)."""

from __future__ import annotations

import asyncio
import gc
import socketserver
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import stripe

from services.cli.demo.scenarios.system import Sandbox
from services.cli.demo.scenarios.workspace import Workspace, open_workspace
from services.sandbox.client import SandboxControl
from tests.e2e.launcher import DistributedSystem

__all__ = ["SilentProxy", "World", "new_world"]


@dataclass
class World:
    system: DistributedSystem
    sandbox: Sandbox
    workspace: Workspace

    @property
    def api_url(self) -> str:
        return self.system.api_url

    @property
    def api_key(self) -> str:
        return self.workspace.api_key

    def stripe_client(
        self, *, base_url: str | None = None, timeout: float = 30.0, async_http: Any = None
    ) -> Any:
        """An official Stripe client on the sandbox; ``async_http`` (a ``stripe.HTTPXClient``
        the caller closes with ``close_async``) serves its ``*_async`` calls."""
        return stripe.StripeClient(
            self.sandbox.api_key,
            base_addresses={"api": base_url or self.sandbox.base_url},
            max_network_retries=0,
            http_client=stripe.RequestsClient(timeout=timeout, async_fallback_client=async_http),
        )

    def control(self) -> SandboxControl:
        return SandboxControl(self.sandbox.base_url)

    def charge(self, amount: int = 5000) -> str:
        response = httpx.post(
            f"{self.sandbox.base_url}/v1/charges",
            auth=(self.sandbox.api_key, ""),
            data={"amount": amount, "currency": "usd"},
            timeout=30,
        )
        response.raise_for_status()
        return str(response.json()["id"])

    def refunds_of(self, charge: str) -> list[dict[str, Any]]:
        with self.control() as control:
            return [r for r in control.state()["refunds"] if r.get("charge") == charge]


def new_world(system: DistributedSystem, name: str) -> World:
    # The launcher leaves the sandbox's log file object to the garbage collector.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        sandbox = system.new_sandbox()
        gc.collect()
    workspace = asyncio.run(open_workspace(system, sandbox, name))
    return World(system, sandbox, workspace)


class SilentProxy:
    """Forwards each request to ``target`` (the provider acts) and then answers nothing until
    the caller gives up: what a client sees when the answer is lost after the write."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.forwarded: list[tuple[str, str]] = []
        self._release = threading.Event()
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = self.request.recv(65536)
                    if not chunk:
                        return
                    head += chunk
                raw_head, body = head.split(b"\r\n\r\n", 1)
                lines = raw_head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
                length = int(headers.get("Content-Length", headers.get("content-length", "0")))
                while len(body) < length:
                    body += self.request.recv(65536)
                headers = {k: v for k, v in headers.items() if k.lower() not in ("host",)}
                httpx.request(method, proxy.target + path, headers=headers, content=body)
                proxy.forwarded.append((method, path))
                proxy._release.wait(timeout=30)  # never answer: the client times out

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @contextmanager
    def running(self) -> Iterator[SilentProxy]:
        self._thread.start()
        try:
            yield self
        finally:
            self._release.set()
            self._server.shutdown()
            self._server.server_close()
