"""The ingress's server limits on a real uvicorn (in process, a free loopback port, raw
sockets): a request head or body that does not arrive in time closes the connection; a
request that arrives in time is served, on a kept-alive connection too; past the concurrency
limit uvicorn answers 503."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from types import TracebackType

import pytest
import uvicorn
from fastapi import FastAPI

from services.ingress.server import limited_protocol, uvicorn_options
from shared.runtime.settings import Settings
from tests.integration.api.live import free_port

pytestmark = pytest.mark.integration

HEAD_S = 0.5
BODY_S = 0.5
GET = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def tiny_app() -> FastAPI:
    app = FastAPI()

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/echo")
    async def echo(body: dict[str, object]) -> dict[str, object]:
        return body

    return app


class Server:
    def __init__(self, app: FastAPI, **options: object) -> None:
        self.port = free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off", **options
        )  # type: ignore[arg-type]
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        return sock


@pytest.fixture
def server() -> Iterator[Server]:
    protocol = limited_protocol(header_timeout_s=HEAD_S, body_timeout_s=BODY_S)
    with Server(tiny_app(), http=protocol, timeout_keep_alive=30) as running:
        yield running


def closed_within(sock: socket.socket, seconds: float) -> float:
    """Seconds until the server closed ``sock`` (EOF), failing after ``seconds``."""
    sock.settimeout(seconds)
    started = time.monotonic()
    while True:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            pytest.fail(f"the connection was still open after {seconds} s")
        except ConnectionResetError:
            return time.monotonic() - started
        if not data:
            return time.monotonic() - started


def response(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data or not data.endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_a_connection_that_sends_nothing_is_closed(server: Server) -> None:
    with server.connect() as sock:
        assert closed_within(sock, HEAD_S + 5) < HEAD_S + 5


def test_a_half_sent_request_head_is_closed(server: Server) -> None:
    with server.connect() as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        time.sleep(HEAD_S / 4)
        sock.sendall(b"X-Slow: 1\r\n")  # still trickling: the deadline does not move
        assert closed_within(sock, HEAD_S + 5) < HEAD_S + 5


def test_a_slow_body_is_closed(server: Server) -> None:
    with server.connect() as sock:
        sock.sendall(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{"
        )
        assert closed_within(sock, BODY_S + 5) < BODY_S + 5


def test_requests_in_time_are_served_and_a_kept_alive_connection_gets_the_deadline_again(
    server: Server,
) -> None:
    with server.connect() as sock:
        for _ in range(3):
            sock.sendall(GET)
            assert response(sock).startswith(b"HTTP/1.1 200")
            time.sleep(HEAD_S * 1.5)  # idle between requests: the keep-alive timeout's business
        body = b'{"a": 1}'
        sock.sendall(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
        )
        time.sleep(BODY_S / 3)
        sock.sendall(body)
        assert response(sock).startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # a second request that never completes
        assert closed_within(sock, HEAD_S + 5) < HEAD_S + 5


def test_past_the_concurrency_limit_the_server_answers_503() -> None:
    protocol = limited_protocol(header_timeout_s=5, body_timeout_s=5)
    with Server(tiny_app(), http=protocol, limit_concurrency=2) as running:
        holders = [running.connect() for _ in range(2)]
        time.sleep(0.2)
        with running.connect() as sock:
            sock.sendall(GET)
            sock.settimeout(10)
            assert sock.recv(65536).startswith(b"HTTP/1.1 503")
        for held in holders:
            held.close()


def test_the_served_ingress_takes_its_limits_from_the_settings() -> None:
    settings = Settings(
        ingress_header_timeout_seconds=3,
        ingress_body_timeout_seconds=7,
        ingress_keep_alive_seconds=4,
        ingress_max_concurrency=50,
    )
    options = uvicorn_options(settings)
    assert options["http"] == "services.ingress.server:HttpProtocol"
    assert options["timeout_keep_alive"] == 4
    assert options["limit_concurrency"] == 50
