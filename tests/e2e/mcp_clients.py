"""``provely mcp`` as MCP clients meet it: launched over stdio by the ``mcp`` SDK's own client,
or started over streamable HTTP and reached with a Bearer key; and a tool answer as text."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from services.cli.spawn import free_port, provely_argv

__all__ = ["answer_of", "http_server", "open_client", "text_of"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}


@contextmanager
def http_server(api_url: str, log: Path) -> Iterator[str]:
    """``provely mcp --transport http`` on a free port; yields its ``/mcp`` URL."""
    port = free_port()
    with log.open("ab") as out:
        process = subprocess.Popen(
            provely_argv("mcp", "--transport", "http", "--port", str(port), "--api-url", api_url),
            env=_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert process.poll() is None, log.read_text(errors="replace")[-3000:]
                assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@asynccontextmanager
async def open_client(
    transport: str, *, api_url: str, api_key: str, http_url: str | None = None
) -> AsyncIterator[Client]:
    """An ``mcp.Client`` on ``provely mcp`` over ``stdio`` (launched here) or ``http``."""
    if transport == "stdio":
        argv = provely_argv("mcp", "--api-url", api_url)
        params = StdioServerParameters(
            command=argv[0], args=argv[1:], env={**_env(), "PROVELY_API_KEY": api_key}
        )
        async with Client(params) as client:
            yield client
        return
    assert http_url is not None
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {api_key}"})
    async with http, Client(streamable_http_client(http_url, http_client=http)) as client:
        yield client


def text_of(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def answer_of(result: Any) -> dict[str, Any]:
    """A successful tool answer as JSON (its structured content, else its text)."""
    assert not result.is_error, text_of(result)
    if isinstance(result.structured_content, dict):
        content = result.structured_content
        return content.get("result", content) if set(content) == {"result"} else content
    loaded = json.loads(text_of(result))
    assert isinstance(loaded, dict)
    return loaded
