"""``provely serve ingress`` as a process: a connection that sends no complete request head
within ``PROVELY_INGRESS_HEADER_TIMEOUT_SECONDS`` is closed, while requests sent in time are
answered (raw sockets against the real command)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.fernet import Fernet

from services.cli.spawn import free_port, provely_argv

pytestmark = pytest.mark.e2e

HEAD_S = 1.0


@pytest.fixture
def ingress(tmp_path: Path) -> Iterator[int]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
    env.update(
        {
            "PROVELY_DATA_DIR": str(tmp_path / "data"),
            "PROVELY_SECRET_KEY": Fernet.generate_key().decode(),
            "PROVELY_INGRESS_HEADER_TIMEOUT_SECONDS": str(HEAD_S),
            "PROVELY_INGRESS_BODY_TIMEOUT_SECONDS": str(HEAD_S),
            "PROVELY_LOG_JSON": "true",
        }
    )
    argv = provely_argv("serve", "ingress", "--host", "127.0.0.1", "--port", str(port))
    log = (tmp_path / "ingress.log").open("wb")
    process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (tmp_path / "ingress.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the ingress did not start"
            time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def seconds_until_closed(sock: socket.socket, limit: float) -> float:
    sock.settimeout(limit)
    started = time.monotonic()
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        pytest.fail(f"still open after {limit} s")
    except ConnectionResetError:
        pass
    return time.monotonic() - started


def test_slow_request_heads_are_closed_and_prompt_ones_served(ingress: int) -> None:
    silent = [socket.create_connection(("127.0.0.1", ingress), timeout=10) for _ in range(20)]
    trickling = socket.create_connection(("127.0.0.1", ingress), timeout=10)
    trickling.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    # Meanwhile a prompt request is answered.
    assert httpx.get(f"http://127.0.0.1:{ingress}/healthz", timeout=5).status_code == 200
    for sock in [*silent, trickling]:
        with sock:
            assert seconds_until_closed(sock, HEAD_S + 10) < HEAD_S + 10
