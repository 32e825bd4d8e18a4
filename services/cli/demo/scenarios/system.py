"""What the scenario engine needs from a running system: the API's URL, admin commands done as
an operator would, and Stripe sandboxes; the progress sink and the engine's one error."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "DEFAULT_SANDBOX_OPTIONS",
    "SETTLE_S",
    "ProgressSink",
    "Sandbox",
    "ScenarioFailed",
    "System",
]

SETTLE_S = 2.0
DEFAULT_SANDBOX_OPTIONS: dict[str, Any] = {"settle_ms": int(SETTLE_S * 1000)}
"""Refunds settle 2 s after creation on the sandbox clock: later than the first observation
(1 s), so Provely sees them pending first; the agent then advances the clock."""


@dataclass(frozen=True)
class Sandbox:
    """A running Stripe sandbox: its base URL and the secret key its API accepts."""

    base_url: str
    api_key: str = "sk_test_provely_demo"


class System(Protocol):
    """A running Provely: the engine's only view of how it was started."""

    @property
    def api_url(self) -> str: ...

    def create_workspace(self, name: str) -> tuple[str, str]:
        """Create a workspace as its operator would; return ``(workspace_id, api_key)``."""
        ...

    def connect_stripe(
        self, workspace_id: str, *, webhook_secret: str, api_key: str, base_url: str
    ) -> None:
        """Store the workspace's Stripe connection (``provely connection set``)."""
        ...

    def connect_http(self, workspace_id: str, *, base_url: str) -> None:
        """Store the workspace's generic http connection to an app of the user's own."""
        ...

    def new_sandbox(self) -> Sandbox:
        """Start a fresh sandbox (its faults and clock are this caller's alone)."""
        ...

    def wait_ready(self) -> None:
        """Block until the API answers (the engine sets up workspaces meanwhile)."""
        ...


ProgressSink = Callable[[str, Mapping[str, Any]], None]
"""``sink(scenario, update)``: ``update`` holds ``note`` (what happens now) and/or ``op``
(the latest operation resource)."""


class ScenarioFailed(Exception):
    """A scenario did not reach what it promised (the message says what happened)."""
