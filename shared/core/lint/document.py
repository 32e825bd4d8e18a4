"""One parsed file linted: a contract validated and checked, or (recognised by its keys) a
skill manifest. The entry points of the CLI, the registry and the HTTP API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from shared.core.contract import Contract
from shared.core.lint.contract import lint_contract
from shared.core.lint.findings import LintError, validation_errors
from shared.core.lint.skill import lint_skill_manifest

__all__ = ["is_skill_manifest", "lint_document", "validate_contract"]


def is_skill_manifest(data: Any) -> bool:
    """A skill manifest names a provider and lists contracts; a contract has an ``id``."""
    return (
        isinstance(data, Mapping)
        and "id" not in data
        and "provider" in data
        and "contracts" in data
    )


def lint_document(data: Any, *, file: str) -> list[LintError]:
    """Lint one parsed file: a contract or (recognised by its keys) a skill manifest."""
    if is_skill_manifest(data):
        return lint_skill_manifest(data, file=file)
    _, errors = validate_contract(data, file=file)
    return errors


def validate_contract(data: Any, *, file: str) -> tuple[Contract | None, list[LintError]]:
    """Validate and lint a contract document; the model is returned only when it has no errors."""
    subject = _subject_of(data, "id")
    if not isinstance(data, Mapping):
        return None, [LintError(file, subject, "(document)", "expected a mapping of fields")]
    try:
        contract = Contract.model_validate(data)
    except ValidationError as exc:
        return None, validation_errors(exc, file=file, subject=subject)
    errors = lint_contract(contract, file=file)
    return (None if errors else contract), errors


def _subject_of(data: Any, key: str) -> str:
    if isinstance(data, Mapping) and isinstance(data.get(key), str) and data[key]:
        return str(data[key])
    return "?"
