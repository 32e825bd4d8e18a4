"""The ingress's HTTP server limits: uvicorn, with deadlines on reading a request.

uvicorn bounds idle keep-alive connections (``timeout_keep_alive``) and the connections and
requests it serves at once (``limit_concurrency``: more get 503), but nothing bounds the time a
client takes to send a request: a connection that sends half a request head, or a body one byte
a minute, is held for ever (its keep-alive timer stops at the first byte). So the ingress serves
HTTP with uvicorn's own protocol classes plus :class:`RequestDeadlines`:

- the request head must be complete ``PROVELY_INGRESS_HEADER_TIMEOUT_SECONDS`` after the
  connection opened, or after the first byte of a later request on a keep-alive connection;
- the body must be complete ``PROVELY_INGRESS_BODY_TIMEOUT_SECONDS`` after the head;

else the connection is closed (the application sees the client go away). A deadline only
covers receiving the request: the time the application takes to answer is not bounded here.

:func:`uvicorn_options` gives ``provely serve ingress`` its server options from the settings.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from shared.runtime.settings import Settings, get_settings

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    _BASE: type[Any] = HttpToolsProtocol
except ImportError:  # pragma: no cover - uvicorn[standard] installs httptools
    _BASE = H11Protocol

__all__ = ["HttpProtocol", "RequestDeadlines", "limited_protocol", "uvicorn_options"]


class RequestDeadlines:
    """Mixin of a uvicorn HTTP protocol class: close a connection whose request head or body
    does not arrive in time. Works on the protocol's common state (``cycle``, its
    ``more_body`` and ``response_complete``), checked after each chunk is parsed."""

    header_timeout_s: float
    body_timeout_s: float
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    cycle: Any

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_for: str | None = None  # "head" or "body"
        self._seen: Any = None  # the last request whose head was complete
        self._arm("head", self.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        between = cycle is None or cycle.response_complete
        if self._deadline is None and between and cycle is self._seen:
            self._arm("head", self.header_timeout_s)  # the first byte of a next request
        super().data_received(data)  # type: ignore[misc]
        cycle = self.cycle
        if cycle is not None and cycle is not self._seen:  # a request head is complete
            self._seen = cycle
            self._disarm()
            if cycle.more_body:
                self._arm("body", self.body_timeout_s)
        elif self._waiting_for == "body" and cycle is not None and not cycle.more_body:
            self._disarm()  # the body is complete

    def _arm(self, what: str, delay: float) -> None:
        self._disarm()
        self._waiting_for = what
        self._deadline = self.loop.call_later(delay, self._late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = None
        self._waiting_for = None

    def _late(self) -> None:
        """The head (no new request since the deadline was set) or the body is late."""
        what = self._waiting_for
        self._deadline = None
        self._waiting_for = None
        cycle = self.cycle
        late = cycle is self._seen and (
            what == "head" or (what == "body" and cycle is not None and cycle.more_body)
        )
        if late and not self.transport.is_closing():
            self.transport.close()


def limited_protocol(
    base: type[Any] = _BASE, *, header_timeout_s: float, body_timeout_s: float
) -> type[Any]:
    """``base`` (a uvicorn HTTP protocol class) with :class:`RequestDeadlines`."""
    return type(
        f"Limited{base.__name__}",
        (RequestDeadlines, base),
        {"header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s},
    )


class HttpProtocol(RequestDeadlines, _BASE):  # type: ignore[misc]
    """What ``provely serve ingress`` runs: the deadlines of the process's settings (each
    uvicorn worker process reads its ``PROVELY_*`` environment)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = get_settings()
        self.header_timeout_s = settings.ingress_header_timeout_seconds
        self.body_timeout_s = settings.ingress_body_timeout_seconds


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's options for the ingress's limits."""
    return {
        "http": f"{__name__}:HttpProtocol",
        "timeout_keep_alive": settings.ingress_keep_alive_seconds,
        "limit_concurrency": settings.ingress_max_concurrency,
    }
