"""One way to change an operation's state, one way to send a message: an AST walk over every
module of ``shared`` and ``services``.

``change_state`` is called only from the named steps of ``shared/lifecycle/steps.py``, each step
calls it once, and nothing else imports it. Celery's ``send`` and ``send_many`` are called only
by ``shared/lifecycle/messages.py``, and no module sends a task any other way (``send_task``,
``apply_async``, ``delay``) but the Celery application's own module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shared.lifecycle import steps
from shared.lifecycle.operations import change_state

REPO = Path(__file__).resolve().parents[3]
STEPS = REPO / "shared" / "lifecycle" / "steps.py"
MESSAGES = REPO / "shared" / "lifecycle" / "messages.py"
CELERY_APP = REPO / "shared" / "runtime" / "celery_app.py"
OTHER_SENDS = frozenset({"send_task", "apply_async", "delay"})


def modules() -> list[Path]:
    return sorted([*(REPO / "shared").rglob("*.py"), *(REPO / "services").rglob("*.py")])


def _called_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def calls_by_function(path: Path) -> Iterator[tuple[str | None, str]]:
    """(enclosing module-level function or None, called name) for every call in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for top in tree.body:
        owner = top.name if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef) else None
        for node in ast.walk(top):
            if isinstance(node, ast.Call):
                name = _called_name(node)
                if name is not None:
                    yield owner, name


def imported_names(path: Path) -> Iterator[tuple[str, str]]:
    """(module, name) of every ``from module import name`` in ``path``."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                yield node.module, alias.name


def test_the_walk_sees_the_repository() -> None:
    names = {path.relative_to(REPO).as_posix() for path in modules()}
    assert {"shared/lifecycle/steps.py", "services/verdict/evaluate.py"} <= names


def test_change_state_is_called_only_from_the_named_steps() -> None:
    step_names = {name for name in steps.__all__ if callable(getattr(steps, name))}
    callers: list[str] = []
    per_step: dict[str | None, int] = {}
    for path in modules():
        for owner, name in calls_by_function(path):
            if name != "change_state":
                continue
            if path != STEPS or owner not in step_names:
                callers.append(f"{path.relative_to(REPO)}: {owner}")
            else:
                per_step[owner] = per_step.get(owner, 0) + 1
    assert callers == []
    assert per_step == dict.fromkeys(step_names, 1), "every step is one state change"


def test_only_the_steps_import_change_state() -> None:
    importers = [
        path.relative_to(REPO).as_posix()
        for path in modules()
        for module, name in imported_names(path)
        if name == "change_state"
    ]
    assert importers == ["shared/lifecycle/steps.py"]


def test_messages_are_sent_only_through_the_message_module() -> None:
    senders: list[str] = []
    for path in modules():
        for owner, name in calls_by_function(path):
            if name in {"send", "send_many"} and path == MESSAGES:
                continue
            if name in OTHER_SENDS and path == CELERY_APP:
                continue
            if name in OTHER_SENDS:
                senders.append(f"{path.relative_to(REPO)}: {owner} calls {name}")
        for module, name in imported_names(path):
            imports_send = module == "shared.runtime.celery_app" and name in {"send", "send_many"}
            if imports_send and path != MESSAGES:
                senders.append(f"{path.relative_to(REPO)} imports {name}")
    assert senders == []


def test_a_receipt_is_issued_only_for_a_final_verdict() -> None:
    """Refused before anything is read or written (no session is needed to see it)."""
    with pytest.raises(ValueError, match="final verdict"):
        change_state(
            None,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]
            receipt=True,
            to_state="OBSERVING",
            verdict="PENDING",
            reason="awaiting_evidence",
            verdict_class=None,
            final=False,
            decision=None,
            cause="test",
            now=datetime.now(UTC),
        )
