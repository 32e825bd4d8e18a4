"""The message module's payloads: keywords that bind to the tasks' parameters, and the
positional form of the previous release binding to the same parameters."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import services.observer.tasks as observer_tasks
import services.verdict.tasks as verdict_tasks
from shared.lifecycle.messages import Correlate, Evaluate, Message, Observe, ObserveMany
from shared.runtime.celery_app import app

_ = (observer_tasks, verdict_tasks)  # registers the tasks on the app

CASES: list[tuple[Message, list[Any]]] = [
    (Observe("op_1", 3), ["op_1", 3]),
    (ObserveMany((("op_1", 3), ("op_2", 5))), [[["op_1", 3], ["op_2", 5]]]),
    (Evaluate("op_1"), ["op_1"]),
    (Correlate(), []),
]


@pytest.mark.parametrize(("message", "positional"), CASES, ids=lambda c: type(c).__name__)
def test_a_message_binds_to_its_task_by_keyword_and_the_old_positional_form_binds_alike(
    message: Message, positional: list[Any]
) -> None:
    signature = inspect.signature(app.tasks[message.TASK].run)
    by_keyword = signature.bind(**message.kwargs())
    by_position = signature.bind(*positional)
    assert by_keyword.arguments == by_position.arguments


def test_every_task_of_the_app_has_a_message() -> None:
    provely_tasks = {name for name in app.tasks if name.startswith("provely.")}
    assert provely_tasks == {message.TASK for message, _ in CASES}


def test_messages_are_frozen_and_travel_as_json_keywords() -> None:
    import json

    message = ObserveMany((("op_1", 3),))
    with pytest.raises(AttributeError):
        message.pairs = ()  # type: ignore[misc]
    assert json.loads(json.dumps(message.kwargs())) == {"pairs": [["op_1", 3]]}
