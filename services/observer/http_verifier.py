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
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from services.observer.readings import Reading, digest_of
from shared.core.paths import dot_segments
from shared.core.types import ObservationStatus

__all__ = ["HttpTarget", "build_url", "read_http"]


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
) -> Reading:
    """GET ``path`` under the target's base URL and turn the answer into a :class:`Reading`."""
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
