"""Watching the operation: a poll of ``GET /v1/operations/{id}`` every interval, each with the
time its request left and its answer came back."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from bench._worlds.bounds import WAIT_STEP_S
from tests.e2e.worlds import World

__all__ = ["Poll", "Watcher"]


@dataclass(frozen=True, slots=True)
class Poll:
    sent: float
    received: float
    state: str
    verdict: str | None
    reason: str | None
    safe: bool
    final: bool
    retry: str


class Watcher:
    def __init__(self, world: World, interval_s: float) -> None:
        self.world = world
        self.interval_s = interval_s
        self.polls: list[Poll] = []
        self.errors = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def last(self) -> Poll | None:
        return self.polls[-1] if self.polls else None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            sent = time.monotonic()
            try:
                response = await self.world.api.get(f"/v1/operations/{self.world.op_id}")
            except httpx.HTTPError:
                self.errors += 1
                await asyncio.sleep(self.interval_s)
                continue
            received = time.monotonic()
            if response.status_code == 200:
                op = response.json()
                self.polls.append(
                    Poll(
                        sent,
                        received,
                        str(op["state"]),
                        op.get("verdict"),
                        op.get("reason"),
                        bool(op.get("safe_to_claim_complete")),
                        bool(op.get("final")),
                        str(op["retry"]["action"]),
                    )
                )
            else:
                self.errors += 1
            await asyncio.sleep(self.interval_s)

    async def until(self, predicate: Callable[[Poll], bool], *, timeout_s: float) -> Poll | None:
        deadline = time.monotonic() + timeout_s
        seen = 0
        while time.monotonic() < deadline:
            for poll in self.polls[seen:]:
                if predicate(poll):
                    return poll
            seen = len(self.polls)
            await asyncio.sleep(WAIT_STEP_S)
        return None
