"""Errors of the sandbox: the Stripe-shaped API error and the state-file error."""

from __future__ import annotations

from typing import Any

__all__ = ["StateFileError", "StripeError"]


class StripeError(Exception):
    """An error answered in Stripe's envelope: ``{"error": {type, code, message, param}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type_ = type_
        self.code = code
        self.param = param

    def body(self, *, request_log_url: str | None = None) -> dict[str, Any]:
        error: dict[str, Any] = {"type": self.type_, "message": self.message}
        if self.code is not None:
            error["code"] = self.code
        if self.param is not None:
            error["param"] = self.param
        if request_log_url is not None:
            error["request_log_url"] = request_log_url
        return {"error": error}


class StateFileError(Exception):
    """The ``--state`` file cannot be read (not JSON, or not a sandbox state of this format)."""
