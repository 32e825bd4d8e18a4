"""The sandbox at run time: its webhook dispatcher, its ``--state`` file and the ticker that
settles refunds and sends deliveries on the sandbox clock."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from services.sandbox.delivery import Dispatcher
from services.sandbox.live import delivery_line
from services.sandbox.model import Sandbox
from services.sandbox.store import save_state

__all__ = ["SandboxRuntime"]

log = logging.getLogger("provely.sandbox")


class SandboxRuntime:
    """The sandbox, its dispatcher and persistence, owned by one app (and one event loop)."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        state_file: Path | None,
        delivery_timeout_s: float,
        tick_s: float,
        live: Callable[[str], None] | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.state_file = state_file
        self.tick_s = tick_s

        def attempted(delivery: dict[str, Any], status: int | None, error: str | None) -> None:
            if live is not None:
                live(delivery_line(delivery, status_code=status, error=error))

        self.dispatcher = Dispatcher(
            sandbox,
            on_change=self.save,
            timeout_s=delivery_timeout_s,
            on_attempt=attempted if live is not None else None,
        )
        self._task: asyncio.Task[None] | None = None

    def save(self) -> None:
        if self.state_file is not None:
            save_state(self.sandbox, self.state_file)

    async def start(self) -> None:
        await self.dispatcher.start()
        self._task = asyncio.create_task(self._run(), name="sandbox-ticker")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.dispatcher.close()
        self.save()

    async def step(self) -> dict[str, int]:
        """Settle what is due, then attempt every delivery that is due."""
        settled = self.sandbox.settle_due()
        if settled:
            self.save()
        dispatched = await self.dispatcher.dispatch_due()
        return {"settled": settled, "dispatched": dispatched}

    async def _run(self) -> None:
        while True:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:  # keep ticking: one bad round must not stop the sandbox
                log.exception("sandbox tick failed")
            await asyncio.sleep(self.tick_s)
