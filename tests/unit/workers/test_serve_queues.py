"""``provely serve observer --queues``: the observer consumes ``observe`` and ``correlate`` by
default; either may be picked alone, nothing else is accepted (a clear error, no worker)."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from services.cli import workers
from services.cli.main import app


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    queues: list[str] = []

    def fake_worker(queue: str, role: str, **_: Any) -> None:
        queues.append(queue)

    monkeypatch.setattr(workers, "_run_worker", fake_worker)
    return queues


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "observe,correlate"),
        (["--queues", "correlate"], "correlate"),
        (["--queues", "observe"], "observe"),
        (["--queues", " correlate , observe,correlate"], "correlate,observe"),
    ],
)
def test_observer_queues(started: list[str], argv: list[str], expected: str) -> None:
    result = CliRunner().invoke(app, ["serve", "observer", *argv])
    assert result.exit_code == 0, result.output
    assert started == [expected]


@pytest.mark.parametrize("value", ["verdict", "observe,verdict", "", " , "])
def test_observer_refuses_other_queues(started: list[str], value: str) -> None:
    result = CliRunner().invoke(app, ["serve", "observer", "--queues", value])
    assert result.exit_code == 2
    assert "--queues takes observe and/or correlate" in result.output
    assert started == []
