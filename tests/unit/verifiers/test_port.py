"""The verifier port: the registry, a fake registered beside the shipped verifiers, and the
rule that keeps verifier names out of every module but the registry's and the verifiers'."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.core import ChannelError
from shared.core.contract import Channel
from shared.core.verifiers import (
    Verifier,
    register,
    registered,
    unregister,
    verifier_named,
    verifier_of,
)
from shared.core.verifiers.event_log import EVENT_LOG
from shared.core.verifiers.http import HTTP
from shared.core.verifiers.webhook import WEBHOOK
from tests.unit.verifiers.fake import FakeVerifier

ROOT = Path(__file__).resolve().parents[3]
#: Where a verifier's name may be written: the port and each verifier's traits and reader.
ALLOWED = {
    "shared/core/verifiers/port.py",
    "shared/core/verifiers/http.py",
    "shared/core/verifiers/webhook.py",
    "shared/core/verifiers/event_log.py",
    "services/observer/http_verifier.py",
    "services/observer/event_log.py",
    "shared/evidence/webhooks.py",
}


@pytest.fixture
def fake() -> Iterator[FakeVerifier]:
    verifier = FakeVerifier()
    register(verifier)
    yield verifier
    unregister(verifier.name)


def _channel(verifier: str) -> dict[str, object]:
    return {
        "name": "c",
        "level": "E2",
        "independence": "x",
        "verifier": verifier,
        "description": "d",
        "http": {"method": "GET", "path": "/v1/x"},
    }


def test_the_shipped_verifiers_are_registered_with_their_traits() -> None:
    assert set(registered()) >= {"http", "webhook", "event_log"}
    assert verifier_named("http") is HTTP
    assert (HTTP.polled, HTTP.reduces_events, HTTP.signed, HTTP.monotone) == (
        True,
        False,
        False,
        True,
    )
    assert (WEBHOOK.polled, WEBHOOK.reduces_events, WEBHOOK.brings_events, WEBHOOK.signed) == (
        False,
        True,
        True,
        True,
    )
    assert (EVENT_LOG.polled, EVENT_LOG.brings_events, EVENT_LOG.signed) == (True, True, False)
    assert (HTTP.level, WEBHOOK.level, EVENT_LOG.level) == ("E2", "E3", "E3")


def test_a_registered_fake_is_a_verifier_a_channel_may_name(fake: FakeVerifier) -> None:
    verifier: Verifier = fake
    channel = Channel.model_validate(_channel("fake"))
    assert verifier_of(channel) is verifier
    assert "fake" in registered()


def test_a_channel_naming_no_registered_verifier_does_not_load(fake: FakeVerifier) -> None:
    unregister(fake.name)
    with pytest.raises(ValueError, match="no verifier is named 'fake'"):
        Channel.model_validate(_channel("fake"))
    with pytest.raises(ChannelError):
        verifier_named("fake")


def test_a_second_verifier_of_one_name_is_refused(fake: FakeVerifier) -> None:
    with pytest.raises(ChannelError, match="registered already"):
        register(FakeVerifier(level="E3"))
    register(fake)  # the same one again is harmless
    assert verifier_named("fake") is fake


def _constants(node: ast.AST, names: set[str]) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in names}


def _finding(node: ast.AST, names: set[str]) -> str | None:
    """A verifier told by its name: a comparison of a ``verifier`` with anything, a name
    compared with something called verifier, a table or ``Literal`` of two verifier names.
    ("http" alone is also an ASGI scope and a transport: only these shapes are findings.)"""
    if isinstance(node, ast.Compare):
        source = ast.unparse(node)
        sides = [node.left, *node.comparators]
        if any(isinstance(s, ast.Attribute) and s.attr == "verifier" for s in sides):
            return "compares .verifier"
        if "verifier" in source and _constants(node, names):
            return f"compares a verifier with {sorted(_constants(node, names))}"
    if isinstance(node, ast.Dict):
        keys = {k.value for k in node.keys if isinstance(k, ast.Constant)} & names
        if len(keys) >= 2:
            return f"a table of verifiers {sorted(keys)}"
    literal = isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("Literal")
    if literal and len(_constants(node, names)) >= 2:
        return "a Literal of verifier names"
    return None


def _names_outside(allowed: set[str]) -> Iterator[str]:
    names = set(registered())
    for base in ("shared", "services"):
        for path in sorted((ROOT / base).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            if where in allowed:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                found = _finding(node, names)
                if found is not None:
                    yield f"{where}:{getattr(node, 'lineno', 0)}: {found}"


def test_no_module_but_the_port_and_the_verifiers_names_a_verifier() -> None:
    assert list(_names_outside(ALLOWED)) == []


def test_the_walk_finds_each_shape_it_forbids(tmp_path: Path) -> None:
    names = set(registered())
    for source in (
        'if channel.verifier == "x": pass',
        'if "webhook" == verifier: pass',
        'LEVEL = {"http": "E2", "webhook": "E3"}',
        'v: Literal["http", "webhook"]',
    ):
        tree = ast.parse(source)
        assert any(_finding(n, names) for n in ast.walk(tree)), source
    assert not any(_finding(n, names) for n in ast.walk(ast.parse('ok = scope["type"] == "http"')))
