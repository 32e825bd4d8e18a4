"""The ``http`` verifier: read one resource back from the provider (evidence level E2).

The base URL and the credentials come from the workspace's connection, never from the contract
or the agent; the contract gives only the path template, which the core fills with URL-encoded
values. A filled path with a ``.`` or ``..`` segment (also percent-encoded), or one that would
leave the base URL's host or path, is not sent: the reading is an ``error`` (``bad_url``). The
request is bounded three ways: a timeout per phase plus an overall deadline, a cap on the body
(streamed, reading stops past the cap), and no redirect is followed (a 3xx could lead off the
connection's host, so it is an ``error``).

Status mapping: 2xx with a JSON body → ``ok`` (parsed value, raw bytes, sha256 digest);
404 → ``not_found``; 429, 5xx, timeouts and transport errors → ``unavailable`` (transient, the
runtime reads again on its schedule); anything else (3xx, other 4xx, a body that is not JSON or
too large) → ``error`` (recorded, not retried sooner than the schedule).

A readback may carry a query string (filled by the core, already URL-encoded). A list readback
(``paginate: stripe_list``) is read by :func:`read_http_list`: every page, each bounded as above,
into one document; a page that cannot be read makes the whole reading fail, and more pages than
the contract allows make it an ``error`` (``too_many_pages``) — never a partial list as ``ok``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

import httpx

from shared.core.contract import canonical_json
from shared.core.paths import dot_segments
from shared.core.types import ObservationStatus
from shared.evidence.readings import Reading, digest_of

__all__ = ["HttpTarget", "build_url", "read_http", "read_http_list"]


@dataclass(frozen=True, slots=True)
class HttpTarget:
    """Where and how to read: the connection's base URL and auth headers, and the limits."""

    base_url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 10.0
    max_bytes: int = 1024 * 1024


def build_url(base_url: str, path: str) -> httpx.URL:
    """Join the connection's base URL and a filled path; refuse anything that leaves its host."""
    base = httpx.URL(base_url)
    if base.scheme not in ("http", "https") or not base.host:
        raise ValueError(f"connection base URL {base_url!r} is not an absolute http(s) URL")
    if not path.startswith("/"):
        raise ValueError(f"readback path {path!r} must start with '/'")
    if dot_segments(path):
        # httpx resolves them ("/v1/refunds/.." is "/v1"), and servers decode "%2e%2e" first.
        raise ValueError(f"readback path {path!r} has a '.' or '..' segment")
    prefix = str(base).rstrip("/")
    url = httpx.URL(prefix + path)
    if (url.scheme, url.host, url.port) != (base.scheme, base.host, base.port):
        raise ValueError("readback URL leaves the connection's host")
    base_path = base.raw_path.split(b"?", 1)[0].rstrip(b"/")
    if not url.raw_path.startswith(base_path + b"/"):
        raise ValueError("readback URL leaves the connection's base path")
    return url


def _provider_time(response: httpx.Response) -> datetime | None:
    value = response.headers.get("date")
    if not value:
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def _status_of(code: int) -> tuple[ObservationStatus, str | None]:
    if 200 <= code < 300:
        return ObservationStatus.OK, None
    if code == 404:
        return ObservationStatus.NOT_FOUND, None
    if code == 429 or code >= 500:
        return ObservationStatus.UNAVAILABLE, f"http_{code}"
    if 300 <= code < 400:
        return ObservationStatus.ERROR, f"redirect_refused_{code}"
    return ObservationStatus.ERROR, f"http_{code}"


def read_http(
    client: httpx.Client,
    *,
    channel: str,
    target: HttpTarget,
    path: str,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    query: str = "",
) -> Reading:
    """GET ``path`` under the target's base URL and turn the answer into a :class:`Reading`.

    ``query`` is an encoded query string (``charge=ch_1&limit=100``), sent as it is."""
    # The reading is stamped with the moment the request left: the state it returns is at
    # least that fresh, so freshness checks stay on the safe side.
    requested_at = clock()
    started = time.monotonic()

    def reading(status: ObservationStatus, **kwargs: object) -> Reading:
        latency = (time.monotonic() - started) * 1000.0
        return Reading(
            channel=channel,
            status=status,
            observed_at=requested_at,
            latency_ms=latency,
            **kwargs,  # type: ignore[arg-type]
        )

    try:
        url = build_url(target.base_url, path)
    except ValueError as exc:
        return reading(ObservationStatus.ERROR, error=f"bad_url: {exc}")
    if query:
        url = url.copy_with(query=query.encode("ascii"))

    deadline = started + target.timeout_s
    headers = {"Accept": "application/json", **dict(target.headers)}
    try:
        with client.stream(
            "GET",
            url,
            headers=headers,
            timeout=httpx.Timeout(target.timeout_s),
            follow_redirects=False,
        ) as response:
            code = response.status_code
            status, error = _status_of(code)
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > target.max_bytes:
                return reading(ObservationStatus.ERROR, http_status=code, error="too_large")
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > target.max_bytes:
                    return reading(ObservationStatus.ERROR, http_status=code, error="too_large")
                if time.monotonic() > deadline:
                    return reading(ObservationStatus.UNAVAILABLE, http_status=code, error="timeout")
                chunks.append(chunk)
            raw = b"".join(chunks)
            provider_timestamp = _provider_time(response)
    except httpx.TimeoutException:
        return reading(ObservationStatus.UNAVAILABLE, error="timeout")
    except httpx.TransportError as exc:
        return reading(ObservationStatus.UNAVAILABLE, error=f"transport: {type(exc).__name__}")

    common = {
        "raw": raw,
        "digest": digest_of(raw),
        "http_status": code,
        "provider_timestamp": provider_timestamp,
    }
    if status is not ObservationStatus.OK:
        return reading(status, error=error, **common)
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return reading(ObservationStatus.ERROR, error="invalid_json", **common)
    return reading(ObservationStatus.OK, value=value, **common)


def read_http_list(
    client: httpx.Client,
    *,
    channel: str,
    target: HttpTarget,
    path: str,
    query: str = "",
    max_pages: int,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    before_page: Callable[[], str | None] | None = None,
) -> Reading:
    """Read a Stripe-style list (``{object: list, data, has_more}``) page by page.

    While a page says ``has_more``, the next is read with ``starting_after=<id of its last
    item>``. The reading's value is one document ``{"object": "list", "data": [every item, in
    the provider's order], "has_more": false, "count": N}``; its raw bytes are the canonical
    JSON of that document and its digest theirs. The first page that is not ``ok`` decides the
    whole reading (a later page that is ``not_found`` is an ``error``: the list existed); a
    page that is not a list is an ``error`` (``not_a_list``); when page ``max_pages`` still
    says ``has_more``, the reading is an ``error`` ``too_many_pages``. An item repeated across
    pages counts once. ``before_page`` runs before every page after the first (the observer's
    rate limit) and may stop the reading: its answer is the error of an ``unavailable`` one.

    The reading is stamped with the moment the first request left, like :func:`read_http`.
    """
    requested_at = clock()
    started = time.monotonic()

    def finish(page: Reading, **changes: Any) -> Reading:
        latency = (time.monotonic() - started) * 1000.0
        return dataclasses.replace(page, observed_at=requested_at, latency_ms=latency, **changes)

    items: list[dict[str, Any]] = []
    seen: set[str] = set()
    provider_timestamp: datetime | None = None
    cursor: str | None = None
    for number in range(1, max_pages + 1):
        if number > 1 and before_page is not None:
            stop = before_page()
            if stop is not None:
                return finish(
                    Reading(channel, ObservationStatus.UNAVAILABLE, requested_at, error=stop)
                )
        page_query = query
        if cursor is not None:
            after = f"starting_after={quote(cursor, safe='')}"
            page_query = f"{query}&{after}" if query else after
        page = read_http(
            client, channel=channel, target=target, path=path, clock=clock, query=page_query
        )
        if page.status is not ObservationStatus.OK:
            if number > 1 and page.status is ObservationStatus.NOT_FOUND:
                return finish(page, status=ObservationStatus.ERROR, error="page_not_found")
            return finish(page)
        if number == 1:
            provider_timestamp = page.provider_timestamp
        listed = _list_page(page.value)
        if listed is None:
            return finish(page, status=ObservationStatus.ERROR, value=None, error="not_a_list")
        data, has_more = listed
        for item in data:
            if item["id"] not in seen:
                seen.add(item["id"])
                items.append(item)
        if not has_more:
            document = {"object": "list", "data": items, "has_more": False, "count": len(items)}
            raw = canonical_json(document)
            return finish(
                page,
                value=document,
                raw=raw,
                digest=digest_of(raw),
                provider_timestamp=provider_timestamp,
            )
        cursor = data[-1]["id"]
    return finish(
        Reading(channel, ObservationStatus.ERROR, requested_at, http_status=200),
        error="too_many_pages",
    )


def _list_page(value: Any) -> tuple[list[dict[str, Any]], bool] | None:
    """``(data, has_more)`` of a list page whose items all carry a string id, else ``None``
    (a page that says ``has_more`` must end with an item to continue after)."""
    if not isinstance(value, dict) or value.get("object") != "list":
        return None
    data, has_more = value.get("data"), value.get("has_more")
    if not isinstance(data, list) or not isinstance(has_more, bool):
        return None
    if not all(isinstance(item, dict) and isinstance(item.get("id"), str) for item in data):
        return None
    if has_more and not data:
        return None
    return data, has_more
