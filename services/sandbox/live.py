"""The sandbox's live lines, in the manner of ``stripe listen``: one per request, one per delivery.

::

    2026-12-01 19:30:02  <-- [200] POST /v1/refunds
    2026-12-01 19:30:02  --> refund.created evt_1a2b… [200] http://127.0.0.1:8000/hook
    2026-12-01 19:30:03  --> charge.refunded evt_3c4d… [error: ConnectError] http://…

``<--`` is a request the sandbox answered (API and control calls alike) with its status;
``-->`` is one delivery attempt of an event to an endpoint with the endpoint's answer.
:class:`LiveRequests` is the ASGI middleware that sees every answer; :func:`delivery_line`
formats an attempt. Both hand a finished line to the ``emit`` callable they are given.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["LiveRequests", "delivery_line", "request_line"]

Emit = Callable[[str], None]


def _stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())


def request_line(method: str, path: str, status: int) -> str:
    return f"{_stamp()}  <-- [{status}] {method} {path}"


def delivery_line(delivery: dict[str, Any], *, status_code: int | None, error: str | None) -> str:
    answer = str(status_code) if status_code is not None else f"error: {error}"
    return (
        f"{_stamp()}  --> {delivery['event_type']} {delivery['event_id']} [{answer}] "
        f"{delivery['url']}"
    )


class LiveRequests:
    """ASGI middleware: ``emit`` one ``<--`` line for every HTTP answer of the wrapped app."""

    def __init__(self, app: Any, emit: Emit) -> None:
        self.app = app
        self.emit = emit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status: list[int] = []

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.emit(request_line(scope["method"], scope["path"], status[0] if status else 500))
