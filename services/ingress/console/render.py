"""The console's templates and the headers every console answer carries.

Templates autoescape everything; the pages load only the console's own CSS and script, so the
Content-Security-Policy allows nothing else (no inline script, no other origin, no framing).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi.responses import HTMLResponse, JSONResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

__all__ = ["CSP", "STATIC", "TEMPLATES", "html", "json", "secured"]

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

_env = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def _when(value: datetime | None) -> str:
    """A time as people read it in a timeline: UTC, to the millisecond."""
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _lag(later: datetime | None, earlier: datetime | None) -> str:
    """``later - earlier`` in seconds, signed (an event's arrival after the provider's time)."""
    if later is None or earlier is None:
        return ""
    return f"{(later - earlier).total_seconds():+.3f} s"


_env.filters["when"] = _when
_env.filters["lag"] = _lag


def secured(response: Response) -> Response:
    """``response`` with the console's security headers."""
    for name, value in _HEADERS.items():
        response.headers[name] = value
    return response


def html(template: str, *, status_code: int = 200, **context: Any) -> HTMLResponse:
    """A rendered page with the console's headers."""
    body = _env.get_template(template).render(**context)
    response = HTMLResponse(body, status_code=status_code)
    secured(response)
    return response


def json(content: Any, *, status_code: int = 200) -> JSONResponse:
    response = JSONResponse(content, status_code=status_code)
    secured(response)
    return response
