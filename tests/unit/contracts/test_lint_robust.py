"""Lint never raises: any value anywhere in a contract gives findings, never a traceback."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.core.lint.document import lint_document
from shared.core.lint.skill import lint_skill_manifest
from tests.unit.contracts.helpers import STRIPE, contract_data, load_yaml

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**12), max_value=10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["$", "$input", "$observed.x.y", "$event.id", "{$x}", "eq", "E9", "-1"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _leaves(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _leaves(value, (*path, i))
    return found


BASE = contract_data()
PATHS = [p for p in _leaves(BASE) if p]


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    for part in path[:-1]:
        doc = doc[part]
    doc[path[-1]] = value


@settings(max_examples=300, deadline=None)
@given(path=st.sampled_from(PATHS), value=json_values)
def test_any_replacement_is_reported_not_raised(path: tuple[Any, ...], value: Any) -> None:
    doc = contract_data()
    _replace(doc, path, value)
    for error in lint_document(doc, file="f.yaml"):
        assert error.file == "f.yaml"
        assert error.field
        assert error.message


@settings(max_examples=100, deadline=None)
@given(value=json_values)
def test_any_document_is_reported_not_raised(value: Any) -> None:
    lint_document(value, file="f.yaml")
    lint_skill_manifest(value, file="f.yaml")


MANIFEST = load_yaml(STRIPE / "skill.yaml")


@settings(max_examples=150, deadline=None)
@given(path=st.sampled_from([p for p in _leaves(MANIFEST) if p]), value=json_values)
def test_any_manifest_replacement_is_reported_not_raised(path: tuple[Any, ...], value: Any) -> None:
    doc = load_yaml(STRIPE / "skill.yaml")
    _replace(doc, path, value)
    lint_skill_manifest(doc, file="skill.yaml", files={}, contracts={})
