"""Stripe's wire format around every ``/v1`` handler: secret-key auth, request ids, the
outage fault, form-encoded parameters, ``expand[]``, idempotency keys and the error envelope.

:func:`make_api` gives the ``api(handler, mutates=…, returns=…)`` that turns a handler of
decoded parameters into a Starlette endpoint (:mod:`services.sandbox.v1` uses it for each route).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import secrets
import string
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response

from services.sandbox.errors import StripeError
from services.sandbox.events import RequestContext
from services.sandbox.expand import check_paths, expand, expand_paths
from services.sandbox.forms import FormError, decode_form, parse_body
from services.sandbox.model import Sandbox
from services.sandbox.runtime import SandboxRuntime
from services.sandbox.settings import SandboxSettings

__all__ = ["Api", "ApiHandler", "Params", "json_response", "make_api"]

log = logging.getLogger("provely.sandbox")

Params = dict[str, Any]
ApiHandler = Callable[[Request, Params, RequestContext], Any]


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(
        json.dumps(body, indent=2) + "\n",
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def _request_id() -> str:
    alphabet = string.ascii_letters + string.digits
    return "req_" + "".join(secrets.choice(alphabet) for _ in range(14))


def _api_key(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    key = ""
    if scheme.lower() == "bearer":
        key = value.strip()
    elif scheme.lower() == "basic":
        try:
            key = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")[0]
        except (binascii.Error, UnicodeDecodeError):
            key = ""
    if not key:
        raise StripeError(
            401,
            "You did not provide an API key. Send it as 'Authorization: Bearer sk_test_...'.",
        )
    if not key.startswith("sk_test_") or len(key) <= len("sk_test_"):
        shown = key[:8] + "*" * 4 + key[-4:] if len(key) > 12 else "****"
        raise StripeError(
            401,
            f"Invalid API Key provided: {shown}. This sandbox accepts any secret test key "
            "(sk_test_...).",
            code="api_key_invalid",
        )
    return key


class Api(Protocol):
    """``api(handler, mutates=…, returns=…)``: a ``/v1`` handler as a Starlette endpoint."""

    def __call__(
        self, handler: ApiHandler, *, mutates: bool, returns: str = ""
    ) -> Callable[[Request], Awaitable[Response]]: ...


# pay down (C901): the wire's dispatch inline
def make_api(sandbox: Sandbox, runtime: SandboxRuntime, settings: SandboxSettings) -> Api:  # noqa: C901
    """The ``api`` of this sandbox: answers are saved by ``runtime`` after a change."""

    def api(  # noqa: C901  # pay down: a table of handlers per path
        handler: ApiHandler, *, mutates: bool, returns: str = ""
    ) -> Callable[[Request], Awaitable[Response]]:
        """``returns``: the object type answered (``list:<type>`` for a list or search), which
        says which ``expand[]`` paths are accepted."""

        async def endpoint(request: Request) -> Response:
            request_id = _request_id()
            version = request.headers.get("stripe-version") or settings.api_version
            headers = {"Request-Id": request_id, "Stripe-Version": version}
            idem_key = request.headers.get("idempotency-key") if request.method == "POST" else None
            if idem_key:
                headers["Idempotency-Key"] = idem_key
            try:
                if sandbox.in_outage():
                    raise StripeError(
                        503,
                        "The API is temporarily unavailable (sandbox outage window). "
                        "Retry the request later.",
                        type_="api_error",
                    )
                key = _api_key(request)
                if request.method == "POST":
                    params = parse_body(await request.body())
                else:
                    params = decode_form(request.query_params.multi_items())
                paths = expand_paths(params.get("expand"))
                check_paths(returns, paths)
                store_key = f"{key}\x00{idem_key}" if idem_key else None
                if store_key is not None and store_key in sandbox.idempotency:
                    saved = sandbox.idempotency[store_key]
                    if saved["path"] != request.url.path or saved["params"] != params:
                        raise StripeError(
                            400,
                            f"The idempotency key {idem_key!r} was first used with other "
                            "parameters or another endpoint; use a new key for a new request.",
                            type_="idempotency_error",
                        )
                    headers["Idempotent-Replayed"] = "true"
                    headers["Original-Request"] = saved["request_id"]
                    return json_response(saved["status"], saved["body"], headers)
                ctx = RequestContext(request_id=request_id, idempotency_key=idem_key)
                result = handler(request, params, ctx)
                body = sandbox.render(result) if "_seq" in result else result
                if paths:
                    body = expand(sandbox, body, paths)
                status = 200
                if store_key is not None:
                    sandbox.idempotency[store_key] = {
                        "path": request.url.path,
                        "params": params,
                        "status": status,
                        "body": body,
                        "request_id": request_id,
                    }
                if mutates or store_key is not None:
                    runtime.save()
                return json_response(status, body, headers)
            except FormError as exc:
                err = StripeError(400, str(exc), param=exc.param)
                return json_response(err.status, err.body(), headers)
            except StripeError as exc:
                return json_response(exc.status, exc.body(), headers)
            except Exception:
                log.exception("sandbox API request failed")
                err = StripeError(500, "The sandbox failed on this request.", type_="api_error")
                return json_response(500, err.body(), headers)

        return endpoint

    return api
