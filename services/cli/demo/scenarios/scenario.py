"""What a scenario is: the verdict it must reach (``Expected``), how the agent plays it
(``Scenario``), and what came out (``Outcome``), with a verdict's reason in words."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from services.cli.demo.scenarios.agent import Agent
from services.cli.demo.scenarios.system import ProgressSink, System

__all__ = ["Expected", "Outcome", "Scenario", "explain"]


@dataclass(frozen=True)
class Expected:
    verdict: str
    reason: str
    state: str
    final: bool = True


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    story: str
    expected: Expected
    play: Callable[[Agent], Awaitable[str]] | None
    """Plays the agent; returns the id of the operation whose verdict is judged."""
    own_sandbox: bool = False
    short_timing: bool = False
    check: Callable[[Agent, Mapping[str, Any]], None] | None = None
    custom: Callable[[System, ProgressSink], Awaitable[Outcome]] | None = None
    """A scenario that sets up its own world (workspaces, apps) and judges itself."""


@dataclass
class Outcome:
    scenario: str
    ok: bool
    expected: Expected
    operation: dict[str, Any] | None = None
    receipt: str | None = None
    """``valid: …`` when the receipt verified, else why not (None while open)."""
    receipt_ok: bool | None = None
    seen: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    others: list[dict[str, Any]] = field(default_factory=list)
    """Further operations a scenario judged (e.g. the refund-ignoring app's)."""
    error: str | None = None
    elapsed_s: float = 0.0

    @property
    def why(self) -> str:
        """The verdict's reason in words (and that of any further operation judged)."""
        text = explain(self.operation or {})
        verdicts = [(v, r) for _, v, r in self.seen if v]
        final = (self.operation or {}).get("verdict")
        if any(v == "UNVERIFIABLE" for v, _ in verdicts) and final != "UNVERIFIABLE":
            path = " → ".join(dict.fromkeys(f"{v} ({r})" for v, r in verdicts))
            text += f"; verdicts on the way: {path}"
        for other in self.others:
            text += f"; and {other.get('verdict')} for {other.get('id')}: {explain(other)}"
        return text


def explain(op: Mapping[str, Any]) -> str:
    """A verdict's reason in words: the deciding condition with what was observed."""
    reason = op.get("reason")
    for condition in op.get("conditions") or []:
        if condition.get("id") == reason:
            return (
                f"{reason}: observed {json.dumps(condition.get('observed'))}, "
                f"expected {condition.get('kind')} {json.dumps(condition.get('expected'))}"
            )
    explanation = (op.get("decision") or {}).get("explanation") or op.get("explanation")
    return str(explanation or reason or "")
