"""The demo's ``System``: the embedded Provely (``provely up``'s, on a free port, with a
short-timing demo skill) plus in-process Stripe sandboxes, and admin commands done in this
process."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.cli.demo.scenarios.system import Sandbox
    from services.cli.embedded import EmbeddedSystem
    from shared.runtime.settings import Settings

__all__ = ["CommandFailed", "EmbeddedDemoSystem"]


class CommandFailed(RuntimeError):
    """An admin command run for the demo failed (the message is its error line)."""


@dataclass
class EmbeddedDemoSystem:
    """The embedded system plus in-process sandboxes: the demo's launcher (a ``System``)."""

    data_dir: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _system: EmbeddedSystem | None = None

    @property
    def api_url(self) -> str:
        assert self._system is not None
        return self._system.api_url

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    def __enter__(self) -> EmbeddedDemoSystem:
        from services.cli.demo.scenarios.refund_contract import write_short_timing_skill
        from services.cli.embedded import EmbeddedSystem
        from services.cli.spawn import free_port

        env = write_short_timing_skill(self.data_dir / "demo-skill")
        existing = os.environ.get("PROVELY_CONTRACT_PATHS")
        if existing:
            env["PROVELY_CONTRACT_PATHS"] = f"{existing}:{env['PROVELY_CONTRACT_PATHS']}"
        existing_keys = os.environ.get("PROVELY_TRUSTED_PUBLISHER_KEYS")
        if existing_keys:
            env["PROVELY_TRUSTED_PUBLISHER_KEYS"] = (
                f"{existing_keys}:{env['PROVELY_TRUSTED_PUBLISHER_KEYS']}"
            )
        env.update(
            {
                "PROVELY_SWEEPER_INTERVAL_SECONDS": "0.5",
                "PROVELY_SWEEPER_GRACE_SECONDS": "2",
                "PROVELY_JITTER_RATIO": "0",
                "PROVELY_LOG_JSON": "true",
            }
        )
        env.update(self.extra_env)
        self._system = EmbeddedSystem(
            data_dir=self.data_dir,
            port=free_port(),
            env=env,
            log_dir=self.log_dir,
            echo=lambda _line: None,
        )
        self._stack.callback(self._system.stop)
        self._system.start()  # services boot while the scenarios set up their workspaces
        return self

    def wait_ready(self) -> None:
        assert self._system is not None
        self._system.wait_ready()

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _settings(self) -> Settings:
        from shared.runtime.settings import Settings

        assert self._system is not None
        env = self._system.child_env()
        return Settings(
            data_dir=Path(env["PROVELY_DATA_DIR"]),
            database_url=env["PROVELY_DATABASE_URL"],
            broker_url=env["PROVELY_BROKER_URL"],
        )

    def create_workspace(self, name: str) -> tuple[str, str]:
        """What ``provely workspace create`` does, in this process (no interpreter to start)."""
        from datetime import UTC, datetime

        from shared.db.session import get_engine, session_scope
        from shared.db.tenants import create_workspace

        settings = self._settings()
        with session_scope(get_engine(settings.resolved_database_url())) as session:
            workspace, api_key = create_workspace(session, name, now=datetime.now(UTC))
            return workspace.id, api_key

    def connect_stripe(
        self, workspace_id: str, *, webhook_secret: str, api_key: str, base_url: str
    ) -> None:
        """What ``provely connection set --provider stripe`` does, in this process."""
        from datetime import UTC, datetime

        from shared.db.session import get_engine, session_scope
        from shared.db.tenants import set_connection
        from shared.lifecycle.contracts import provider_skill

        settings = self._settings()
        skill = provider_skill("stripe")
        if skill is None:
            raise CommandFailed("the Stripe skill is not loaded")
        with session_scope(get_engine(settings.resolved_database_url())) as session:
            set_connection(
                session,
                workspace_id,
                provider="stripe",
                webhook_secrets=[webhook_secret],
                api_key=api_key,
                base_url=base_url,
                signature_scheme=skill.signature_scheme or "stripe",
                signature_tolerance_seconds=skill.signature_tolerance_seconds or 300,
                rate_limit_per_second=skill.rate_limit_per_second,
                settings=settings,
                now=datetime.now(UTC),
            )

    def connect_http(self, workspace_id: str, *, base_url: str) -> None:
        """What ``provely connection set --provider http`` does: read back the user's app."""
        import base64
        import secrets
        from datetime import UTC, datetime

        from shared.db.session import get_engine, session_scope
        from shared.db.tenants import set_connection

        settings = self._settings()
        # The app sends no webhooks to Provely; the connection still holds a secret.
        secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode("ascii")
        with session_scope(get_engine(settings.resolved_database_url())) as session:
            set_connection(
                session,
                workspace_id,
                provider="http",
                webhook_secrets=[secret],
                api_key=None,
                base_url=base_url,
                signature_scheme="standard_webhooks",
                settings=settings,
                now=datetime.now(UTC),
            )

    def new_sandbox(self) -> Sandbox:
        from services.cli.demo.scenarios.system import DEFAULT_SANDBOX_OPTIONS, Sandbox
        from services.sandbox.runner import run_sandbox

        running = self._stack.enter_context(run_sandbox(**DEFAULT_SANDBOX_OPTIONS))
        return Sandbox(base_url=running.base_url, api_key=running.api_key)

    def log_tail(self, lines: int = 15) -> str:
        chunks = []
        for path in sorted(self.log_dir.glob("*.log")):
            text = path.read_text("utf-8", errors="replace").splitlines()[-lines:]
            chunks.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(chunks)
