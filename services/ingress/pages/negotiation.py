"""Which format an ``Accept`` header asks for, and the headers every page answer carries.

HTML unless the header prefers Markdown (``text/markdown``) or JSON (``application/json``) by
its q-values; a tie goes to the earlier of HTML, Markdown, JSON. An unparsable or unsupported
header gets HTML (a page is never refused for its Accept header).
"""

from __future__ import annotations

from typing import Literal

__all__ = ["CSP", "Format", "page_headers", "preferred_format"]

Format = Literal["html", "markdown", "json"]
_TYPES: tuple[tuple[str, Format], ...] = (
    ("text/html", "html"),
    ("text/markdown", "markdown"),
    ("application/json", "json"),
)
MEDIA_TYPES: dict[Format, str] = {
    "html": "text/html; charset=utf-8",
    "markdown": "text/markdown; charset=utf-8",
    "json": "application/json",
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"
)
"""The pages' Content-Security-Policy: own scripts and styles only, no inline script."""
MAX_AGE_S = 300


def _q(params: list[str]) -> float:
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            try:
                return max(0.0, min(1.0, float(value)))
            except ValueError:
                return 0.0
    return 1.0


def _covers(media: str, wanted: str) -> bool:
    kind, _, sub = media.partition("/")
    want_kind = wanted.partition("/")[0]
    return media == wanted or media == "*/*" or (kind == want_kind and sub == "*")


def preferred_format(accept: str | None) -> Format:
    """The format ``accept`` prefers among HTML, Markdown and JSON (HTML by default)."""
    if not accept:
        return "html"
    best: Format = "html"
    best_q = -1.0
    for wanted, fmt in _TYPES:
        q = 0.0
        exact = False
        for part in accept.split(","):
            media, *params = part.strip().split(";")
            media = media.strip().lower()
            if not _covers(media, wanted):
                continue
            if media == wanted:
                q, exact = _q(params), True
            elif not exact:
                q = max(q, _q(params) - 0.001)  # a wildcard loses a tie to a named type
        if q > best_q:
            best, best_q = fmt, q
    return best if best_q > 0 else "html"


def page_headers(*, etag: str | None) -> dict[str, str]:
    """Cache, negotiation and security headers of a page answer."""
    headers = {
        "Cache-Control": f"public, max-age={MAX_AGE_S}",
        "Vary": "Accept",
        "Content-Security-Policy": CSP,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }
    if etag is not None:
        headers["ETag"] = etag
    return headers
