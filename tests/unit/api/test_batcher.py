"""The intake's group commit: one batch at a time, a second beside it only when a full batch
waits (the batch's database step is replaced by a coroutine the test releases; the batcher's
own bookkeeping is the real one)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from services.ingress.intake import webhook_batches
from services.ingress.intake.webhook_batches import MAX_BATCH, _Batcher
from services.ingress.intake.webhook_checks import Outcome
from shared.intake.results import IntakeResult


class Held:
    """Stands in for ``_ingest_batch_pg``: records each batch's items and holds it until
    released, then answers each as stored."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []
        self.release: list[asyncio.Event] = []

    async def ingest(self, connections: Any, settings: Any, items: list[Any]) -> list[Any]:
        self.batches.append(items)
        done = asyncio.Event()
        self.release.append(done)
        await done.wait()
        return [Outcome(item, IntakeResult(event_pk=1, duplicate=False)) for item in items]


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_one_batch_at_a_time_until_a_full_batch_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    held = Held()
    monkeypatch.setattr(webhook_batches, "_ingest_batch_pg", held.ingest)
    monkeypatch.setattr(webhook_batches, "_connections_for", lambda engine: None)
    engine = SimpleNamespace(dialect=SimpleNamespace(name="postgresql"))
    settings = object()

    async def scenario() -> None:
        batcher = _Batcher()
        first = asyncio.ensure_future(batcher.submit(engine, settings, "a"))
        await _settle()
        assert [len(b) for b in held.batches] == [1]  # written at once, alone
        # fewer than a full batch arrive meanwhile: they wait for the first
        waiting = [
            asyncio.ensure_future(batcher.submit(engine, settings, f"w{i}"))
            for i in range(MAX_BATCH - 1)
        ]
        await _settle()
        assert [len(b) for b in held.batches] == [1]
        # the delivery that makes a full batch starts a second one beside the first
        waiting.append(asyncio.ensure_future(batcher.submit(engine, settings, "last")))
        await _settle()
        assert [len(b) for b in held.batches] == [1, MAX_BATCH]
        assert batcher.running == 2
        # more arrive: no third batch, and none beside the full one while fewer than a full
        # batch wait; they go together when nothing else is being written
        late = [asyncio.ensure_future(batcher.submit(engine, settings, f"l{i}")) for i in range(3)]
        await _settle()
        assert len(held.batches) == 2
        held.release[0].set()
        await _settle()
        assert first.done()
        assert len(held.batches) == 2
        held.release[1].set()
        await _settle()
        assert [len(b) for b in held.batches] == [1, MAX_BATCH, 3]
        held.release[2].set()
        await _settle()
        assert batcher.running == 0
        assert batcher.pending == []
        answers = await asyncio.gather(*waiting, *late)
        assert [a.event_id for a in answers] == [
            *(f"w{i}" for i in range(MAX_BATCH - 1)),
            "last",
            *(f"l{i}" for i in range(3)),
        ]

    asyncio.run(scenario())
