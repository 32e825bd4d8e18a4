"""The agent API's per-request dependencies that do no I/O run on the event loop.

FastAPI runs a plain-function dependency in its threadpool: a hop per request and dependency,
which cost more CPU than the checks themselves (``bench/api.py``). The route's own work is the
one hop a request should take.
"""

from __future__ import annotations

import inspect

from services.ingress.deps import bearer_key
from services.ingress.request_checks import check_request


def test_checks_without_io_are_coroutines() -> None:
    assert inspect.iscoroutinefunction(check_request)
    assert inspect.iscoroutinefunction(bearer_key)
