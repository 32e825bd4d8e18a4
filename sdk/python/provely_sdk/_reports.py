"""The bodies of ``POST /v1/operations/{id}/action``: started, result, error, timeout.

A timeout is reported as an error without an HTTP status and with ``type: timeout``: the
agent does not know whether the provider wrote anything, and says exactly that.
"""

from __future__ import annotations

from typing import Any

__all__ = ["error_report", "result_report", "started_report", "timeout_report"]


def started_report() -> dict[str, Any]:
    return {"phase": "started"}


def result_report(result: dict[str, Any], *, http_status: int) -> dict[str, Any]:
    return {"phase": "result", "http_status": http_status, "result": result}


def error_report(error: dict[str, Any], *, http_status: int | None) -> dict[str, Any]:
    return {"phase": "error", "http_status": http_status, "error": error}


def timeout_report(message: str) -> dict[str, Any]:
    return error_report({"type": "timeout", "message": message}, http_status=None)
