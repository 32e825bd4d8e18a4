"""The harness's own failures and its retried requests: what says nothing about Provely."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx

__all__ = ["HarnessError", "retrying"]

T = TypeVar("T")


class HarnessError(Exception):
    """The harness could not play the world (not a finding about Provely)."""


async def retrying(request: Callable[[], Awaitable[T]], *, tries: int = 4) -> T:
    """An idempotent request (a read, a sandbox control call) tried again when the connection
    breaks: a keep-alive connection the server closed while it sat idle fails the next request
    without an answer, which says nothing about the system under test."""
    for attempt in range(tries):
        try:
            return await request()
        except httpx.TransportError:
            if attempt == tries - 1:
                raise
            await asyncio.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")
