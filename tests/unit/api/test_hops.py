"""The agent API's per-request dependencies that do no I/O run on the event loop.

FastAPI runs a plain-function dependency in its threadpool: a hop per request and dependency,
which cost more CPU than the checks themselves (``bench/api.py``). The route's own work is the
one hop a request should take: the hot routes serialize their answer in it too.
"""

from __future__ import annotations

import inspect
from typing import get_type_hints

from fastapi import Response

from services.ingress.api.operations import create, get_operation, report_action
from services.ingress.deps import bearer_key
from services.ingress.request_checks import check_request


def test_checks_without_io_are_coroutines() -> None:
    assert inspect.iscoroutinefunction(check_request)
    assert inspect.iscoroutinefunction(bearer_key)


def test_the_hot_routes_answer_a_response_they_serialized() -> None:
    # A route returning a model has FastAPI validate it again through a second threadpool hop.
    for endpoint in (create, report_action, get_operation):
        assert get_type_hints(endpoint)["return"] is Response, endpoint.__name__
