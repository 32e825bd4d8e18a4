"""Run an ASGI app (the sandbox, or any test receiver) on a loopback port in a background thread.

``run_app(app)`` serves any ASGI app with uvicorn in a daemon thread and yields its base URL;
``run_sandbox(**options)`` does so for a fresh :func:`services.sandbox.stripe.create_app` and
yields a :class:`RunningSandbox` (base URL, API key, the app's state and a control client).
Both stop the server and join the thread on exit. Usable from pytest fixtures or a demo script.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from services.sandbox.client import SandboxControl

__all__ = ["RunningSandbox", "run_app", "run_sandbox"]


@contextlib.contextmanager
def run_app(
    app: Any, *, host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 10.0
) -> Iterator[str]:
    """Serve ``app`` on ``host:port`` (0: a free port) until the block ends; yields its URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as exc:  # reported to the caller below
            failure.append(exc)

    thread = threading.Thread(target=serve, name=f"asgi-{bound_port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if failure or not thread.is_alive():
            sock.close()
            raise RuntimeError(f"the app on port {bound_port} failed to start") from (
                failure[0] if failure else None
            )
        if time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError(f"the app on port {bound_port} did not start in time")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{bound_port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@dataclass
class RunningSandbox:
    """A sandbox serving on ``base_url``; ``control`` drives ``/_sandbox``, ``sandbox`` is its
    state (read it from tests, but change it through HTTP: the server's loop owns it)."""

    base_url: str
    api_key: str
    app: Any
    _control: SandboxControl | None = field(default=None, repr=False)

    @property
    def sandbox(self) -> Any:
        return self.app.state.sandbox

    @property
    def control(self) -> SandboxControl:
        """One control client per running sandbox, closed when the sandbox stops."""
        if self._control is None:
            from services.sandbox.client import SandboxControl

            self._control = SandboxControl(self.base_url)
        return self._control


@contextlib.contextmanager
def run_sandbox(
    *, host: str = "127.0.0.1", port: int = 0, api_key: str = "sk_test_sandbox", **options: Any
) -> Iterator[RunningSandbox]:
    """Start a sandbox (``options`` go to ``create_app``) on a free port; yields its handle."""
    from services.sandbox.stripe import create_app

    app = create_app(**options)
    with run_app(app, host=host, port=port) as base_url:
        running = RunningSandbox(base_url=base_url, api_key=api_key, app=app)
        try:
            yield running
        finally:
            if running._control is not None:
                running._control.close()
