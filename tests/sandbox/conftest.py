"""Fixtures: a real sandbox server and a recording webhook receiver per module, reset per test."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import stripe
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from services.sandbox.client import SandboxControl
from services.sandbox.runner import RunningSandbox, run_app, run_sandbox

API_KEY = "sk_test_provely_sandbox_tests"

#: One pooled client for the tests' raw HTTP calls (building an httpx client costs ~0.1 s).
http = httpx.Client(timeout=30)


@pytest.fixture(scope="session", autouse=True)
def _close_http() -> Iterator[None]:
    yield
    http.close()


@dataclass
class Receiver:
    """A webhook receiver that records every delivery and can answer with failures."""

    url: str = ""
    received: list[dict[str, Any]] = field(default_factory=list)
    fail_next: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self.lock:
            self.received.clear()
            self.fail_next = 0

    def events(self) -> list[dict[str, Any]]:
        with self.lock:
            return [json.loads(r["body"]) for r in self.received]


def _receiver_app(receiver: Receiver) -> Starlette:
    async def hook(request: Request) -> JSONResponse:
        body = (await request.body()).decode("utf-8")
        with receiver.lock:
            receiver.received.append({"headers": dict(request.headers), "body": body})
            if receiver.fail_next > 0:
                receiver.fail_next -= 1
                return JSONResponse({"error": "try later"}, status_code=500)
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route("/hook", hook, methods=["POST"])])


@pytest.fixture(scope="module")
def running() -> Iterator[RunningSandbox]:
    with run_sandbox(
        api_key=API_KEY, settle_ms=5000, retry_base_ms=10_000, retry_max_attempts=4
    ) as sb:
        yield sb


@pytest.fixture(scope="module")
def receiver_server() -> Iterator[Receiver]:
    receiver = Receiver()
    with run_app(_receiver_app(receiver)) as base_url:
        receiver.url = f"{base_url}/hook"
        yield receiver


@pytest.fixture
def control(running: RunningSandbox) -> SandboxControl:
    control = running.control
    control.reset()
    return control


@pytest.fixture
def receiver(receiver_server: Receiver, control: SandboxControl) -> Receiver:
    receiver_server.reset()
    return receiver_server


@pytest.fixture
def client(running: RunningSandbox, control: SandboxControl) -> stripe.StripeClient:
    return stripe.StripeClient(
        running.api_key, base_addresses={"api": running.base_url}, max_network_retries=0
    )


@pytest.fixture
def endpoint(client: stripe.StripeClient, receiver: Receiver) -> Any:
    """A webhook endpoint for every event type, pointing at the receiver."""
    return client.v1.webhook_endpoints.create(params={"url": receiver.url, "enabled_events": ["*"]})
