"""Contract lint: the shipped files pass; each kind of mistake is named by file, contract and field.

The pure checks (``shared.core.lint``) are exercised on mutated copies of the shipped
``stripe.refund.succeeded`` document; the CLI is run through typer's CliRunner on files
written to a temporary directory.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from services.cli.main import app
from shared.core.lint.document import is_skill_manifest, lint_document, validate_contract
from shared.core.lint.findings import LintError
from shared.core.lint.skill import lint_skill_manifest
from tests.unit.contracts.helpers import CONTRACTS, CREATED, STRIPE, SUCCEEDED, contract_data

FILE = "x.yaml"
CID = "stripe.refund.succeeded"

Mutation = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Mutation:
    """Set a value at a dotted path with [i] indexes, e.g. ``channels[0].http.path``."""

    def mutate(doc: dict[str, Any]) -> None:
        parts = [p for p in path.replace("[", ".[").split(".") if p]
        target: Any = doc
        for part in parts[:-1]:
            target = target[int(part[1:-1])] if part.startswith("[") else target[part]
        last = parts[-1]
        if last.startswith("["):
            target[int(last[1:-1])] = value
        else:
            target[last] = value

    return mutate


def _drop(path: str) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        *head, last = path.split(".")
        target: Any = doc
        for part in head:
            target = target[part]
        del target[last]

    return mutate


def _append(section: str, item: dict[str, Any]) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        doc[section].append(item)

    return mutate


def _lint(mutation: Mutation | None = None) -> list[LintError]:
    doc = contract_data(SUCCEEDED)
    if mutation is not None:
        mutation(doc)
    return lint_document(doc, file=FILE)


@pytest.mark.parametrize("path", [SUCCEEDED, CREATED])
def test_shipped_contracts_lint_clean(path: Path) -> None:
    contract, errors = validate_contract(contract_data(path), file=str(path))
    assert errors == []
    assert contract is not None


# (mutation, field, words in the message)
CASES: list[tuple[str, Mutation, str, str]] = [
    (
        "unknown operator",
        _set("completion[0].op", "equals"),
        "completion[0].op",
        "unknown operator 'equals'",
    ),
    (
        "observed of an undeclared channel",
        _set("completion[1].path", "$observed.refund_lookup.amount"),
        "completion[1].path",
        "channel refund_lookup is not declared",
    ),
    (
        "evidence names the wrong channel",
        _set("completion[0].evidence", "refund_succeeded_events"),
        "completion[0].evidence",
        "not the channel the condition reads (refund_readback)",
    ),
    (
        "evidence names no channel",
        _set("completion[0].evidence", "nowhere"),
        "completion[0].evidence",
        "nowhere is not a declared channel",
    ),
    (
        "condition reads no channel",
        _set("completion[0].path", "$action.result.status"),
        "completion[0].evidence",
        "reads no channel",
    ),
    (
        "negative poll interval",
        _set("timing.poll_interval_ms", -5000),
        "timing.poll_interval_ms",
        "must be positive, got -5000",
    ),
    (
        "unknown root",
        _set("channels[0].http.path", "/v1/refunds/{$foo}"),
        "channels[0].http.path",
        "unknown root $foo",
    ),
    (
        "undeclared input",
        _set("negative[1].value", "$input.amount_cents"),
        "negative[1].value",
        "input amount_cents is not declared",
    ),
    (
        "bad action path",
        _set("subject.identity.expr", "$action.id"),
        "subject.identity.expr",
        "$action.result",
    ),
    (
        "bad operation field",
        _set("completion[3].value", "$operation.started_at"),
        "completion[3].value",
        "$operation.id and .created_at",
    ),
    (
        "undeclared correlation key",
        _set("channels[0].http.path", "/v1/refunds/{$correlation.refund}"),
        "channels[0].http.path",
        "correlation key refund is not declared",
    ),
    (
        "event outside a match rule",
        _set("negative[0].value", "$event.data.object.charge"),
        "negative[0].value",
        "only valid inside a webhook channel's match rules",
    ),
    (
        "match rule not on the event",
        _set("channels[1].webhook.match[0].path", "$observed.refund_readback.id"),
        "channels[1].webhook.match[0].path",
        "a match rule reads the event",
    ),
    (
        "in takes a list",
        _set("verdict_map[0].value", "failed"),
        "verdict_map[0].value",
        "in takes a list",
    ),
    (
        "expression inside a list",
        _set("verdict_map[1].value", ["pending", "$input.status"]),
        "verdict_map[1].value[1]",
        "input status is not declared",
    ),
    (
        "negative condition on the agent's word",
        _set("negative[0].path", "$action.result.charge"),
        "negative[0].path",
        "reads no $observed channel",
    ),
    (
        "verdict rule on the action response",
        _set("verdict_map[0].path", "$action.result.status"),
        "verdict_map[0].path",
        "reads no $observed channel",
    ),
    (
        "rule id taken from the runtime",
        _set("verdict_map[1].id", "evidence_unavailable"),
        "verdict_map[1].id",
        "a reason the runtime gives itself",
    ),
    (
        "gt takes a number",
        _set("negative[4].value", "one"),
        "negative[4].value",
        "gt takes a number",
    ),
    (
        "gt on a string input",
        _set("negative[4].value", "$input.charge"),
        "negative[4].value",
        "gt takes a number",
    ),
    (
        "time op on a non-time",
        _set("completion[3].value", "$operation.id"),
        "completion[3].value",
        "time_after takes a time expression",
    ),
    (
        "time op on a word",
        _set("negative[3].value", "yesterday"),
        "negative[3].value",
        "time_before takes a time expression",
    ),
    (
        "exists with an operand",
        _set("completion[0]", {**contract_data()["completion"][0], "op": "exists", "value": 3}),
        "completion[0].value",
        "exists takes no operand",
    ),
    ("unknown level", _set("channels[0].level", "E5"), "channels[0].level", "unknown level 'E5'"),
    ("http at E3", _set("channels[0].level", "E3"), "channels[0].level", "observes at E2"),
    (
        "minimum level E1",
        _set("evidence.minimum_level", "E1"),
        "evidence.minimum_level",
        "never verifies",
    ),
    (
        "minimum channels out of reach",
        _set("evidence.minimum_channels", 3),
        "evidence.minimum_channels",
        "fewer than 3",
    ),
    (
        "backoff below poll",
        _set("timing.backoff.max_ms", 1000),
        "timing.backoff.max_ms",
        "below the poll interval",
    ),
    (
        "stale window zero",
        _set("timing.stale_read_window_ms", 0),
        "timing.stale_read_window_ms",
        "must be positive",
    ),
    ("no attempts", _set("timing.max_attempts", 0), "timing.max_attempts", "at least 1"),
    ("timeout within delay", _set("timing.timeout_ms", 500), "timing.timeout_ms", "initial delay"),
    (
        "timeout claims failure",
        _set("timing.on_timeout.verdict", "FAILED"),
        "timing.on_timeout.verdict",
        "UNVERIFIABLE",
    ),
    (
        "verdict map verifies",
        _set("verdict_map[1].verdict", "VERIFIED"),
        "verdict_map[1].verdict",
        "may not give VERIFIED",
    ),
    (
        "verdict map expires",
        _set("verdict_map[1].verdict", "EXPIRED"),
        "verdict_map[1].verdict",
        "may not give EXPIRED",
    ),
    (
        "duplicate condition id",
        _set("negative[0].id", "refund_status_succeeded"),
        "negative[0].id",
        "used twice",
    ),
    (
        "duplicate channel",
        _set("channels[2].name", "refund_readback"),
        "channels[2].name",
        "declared twice",
    ),
    (
        "http channel without http",
        _set("channels[0].http", None),
        "channels[0].http",
        "needs its http parameters",
    ),
    (
        "webhook channel without webhook",
        _set("channels[1].webhook", None),
        "channels[1].webhook",
        "needs its webhook parameters",
    ),
    (
        "strong fingerprint",
        _set("correlation[2].assurance", "strong"),
        "correlation[2].assurance",
        "is weak",
    ),
    ("unknown field", _set("timing.jitter", 0.1), "timing.jitter", "unknown field"),
    (
        "missing field",
        _drop("timing.max_attempts"),
        "timing.max_attempts",
        "required field is missing",
    ),
    ("bad version", _set("version", "1.0"), "version", "MAJOR.MINOR.PATCH"),
    (
        "negative class missing",
        _set("negative[0].class", " "),
        "negative[0].class",
        "name the class",
    ),
    (
        "extra negative with an unknown channel",
        _append(
            "negative",
            {
                "id": "x_y",
                "class": "c",
                "reason": "r",
                "path": "$observed.ghost.n",
                "op": "gt",
                "value": 1,
            },
        ),
        "negative[5].path",
        "channel ghost is not declared",
    ),
]


@pytest.mark.parametrize(("name", "mutation", "field", "words"), CASES, ids=[c[0] for c in CASES])
def test_mistake_is_named(name: str, mutation: Mutation, field: str, words: str) -> None:
    errors = _lint(mutation)
    assert errors, name
    matching = [e for e in errors if e.field == field]
    assert matching, f"no error on {field}: {[str(e) for e in errors]}"
    assert any(words in e.message for e in matching), [str(e) for e in matching]
    assert all(e.file == FILE for e in errors)
    assert all(e.subject == CID for e in errors if e.field != "id")


def test_error_format_names_file_contract_and_field() -> None:
    (error,) = _lint(_set("channels[0].http.path", "/v1/refunds/{$foo}"))
    assert str(error) == f"{FILE}: {CID}: channels[0].http.path: unknown root $foo"
    assert error.as_dict() == {
        "file": FILE,
        "contract": CID,
        "field": "channels[0].http.path",
        "message": "unknown root $foo",
    }


def test_not_a_mapping() -> None:
    (error,) = lint_document(["a"], file=FILE)
    assert str(error) == f"{FILE}: ?: (document): expected a mapping of fields"


def test_schema_errors_come_first_in_the_same_format() -> None:
    errors = _lint(_set("completion[0].op", "equals"))
    assert [e.field for e in errors] == ["completion[0].op"]
    assert str(errors[0]).startswith(f"{FILE}: {CID}: completion[0].op: unknown operator")


def test_literal_time_values_are_accepted() -> None:
    assert _lint(_set("negative[3].value", "2026-09-05T00:00:00Z")) == []
    assert _lint(_set("negative[3].value", 1788566400)) == []


# --------------------------------------------------------------------------- skill manifests


def _manifest() -> dict[str, Any]:
    data = yaml.safe_load((STRIPE / "skill.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_manifest_is_recognised_and_lints_clean() -> None:
    data = _manifest()
    assert is_skill_manifest(data)
    assert not is_skill_manifest(contract_data())
    files = {e["file"]: (STRIPE / e["file"]).read_bytes() for e in data["contracts"]}
    assert lint_skill_manifest(data, file="skill.yaml", files=files) == []


def test_manifest_hash_mismatch_and_missing_file_are_named() -> None:
    data = _manifest()
    files: dict[str, bytes | None] = {
        e["file"]: (STRIPE / e["file"]).read_bytes() for e in data["contracts"]
    }
    files["refund.succeeded.yaml"] = SUCCEEDED.read_bytes() + b"\n"
    files["refund.created.yaml"] = None
    errors = lint_skill_manifest(data, file="skill.yaml", files=files)
    assert [(e.field, e.subject) for e in errors] == [
        ("contracts[0].sha256", "skill stripe 0.1.0"),
        ("contracts[1].file", "skill stripe 0.1.0"),
    ]
    assert "changed since the skill was signed" in errors[0].message


def test_manifest_schema_error_and_event_shape() -> None:
    data = _manifest()
    data["readback"]["auth"] = "magic"
    (error,) = lint_skill_manifest(data, file="skill.yaml")
    assert error.field == "readback.auth"
    data = _manifest()
    data["event_shape"]["id"] = "id"
    (error,) = lint_skill_manifest(data, file="skill.yaml")
    assert error.field == "event_shape.id"


# --------------------------------------------------------------------------- the CLI


runner = CliRunner()


def _write(tmp_path: Path, mutation: Mutation | None, name: str = "broken.yaml") -> Path:
    doc = contract_data(SUCCEEDED)
    if mutation is not None:
        mutation(doc)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def test_cli_lint_shipped_contracts_exits_0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(CONTRACTS.parent)
    result = runner.invoke(app, ["contracts", "lint"])
    assert result.exit_code == 0, result.output
    manifests = sorted(CONTRACTS.rglob("skill.yaml"))
    contracts = [p for p in CONTRACTS.rglob("*.yaml") if p.name != "skill.yaml"]
    files = len(manifests) + len(contracts)
    assert (
        f"ok: {files} files ({len(contracts)} contract(s), {len(manifests)} skill manifest(s))"
        in result.output
    )
    result = runner.invoke(app, ["contracts", "lint", str(CONTRACTS)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("mutation", "field"),
    [
        (_set("completion[0].op", "equals"), "completion[0].op"),
        (_set("completion[1].path", "$observed.refund_lookup.amount"), "completion[1].path"),
        (_set("completion[0].evidence", "refund_succeeded_events"), "completion[0].evidence"),
        (_set("timing.poll_interval_ms", -5000), "timing.poll_interval_ms"),
    ],
    ids=["unknown-operator", "undeclared-channel", "wrong-evidence", "negative-poll-interval"],
)
def test_cli_lint_broken_copy_exits_1_naming_file_and_field(
    tmp_path: Path, mutation: Mutation, field: str
) -> None:
    path = _write(tmp_path, mutation)
    result = runner.invoke(app, ["contracts", "lint", str(path)])
    assert result.exit_code == 1, result.output
    assert f"{path}: {CID}: {field}: " in result.output


def test_cli_lint_directory_json_and_duplicates(tmp_path: Path) -> None:
    _write(tmp_path, None, "a.yaml")
    _write(tmp_path, _set("title", "Another title."), "b.json")
    (tmp_path / "b.json").write_text(
        json.dumps(yaml.safe_load((tmp_path / "b.json").read_text()), default=str)
    )
    result = runner.invoke(app, ["contracts", "lint", "--json", str(tmp_path)])
    assert result.exit_code == 1
    payload = json.loads(result.stdout)
    (error,) = payload["errors"]
    assert error["file"] == str(tmp_path / "b.json")
    assert error["field"] == "version"
    assert "a.yaml" in error["message"]


def test_cli_lint_yaml_syntax_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("id: [unclosed\n", encoding="utf-8")
    result = runner.invoke(app, ["contracts", "lint", str(path)])
    assert result.exit_code == 1
    assert f"{path}: ?: (document): not valid YAML" in result.output


def test_cli_lint_missing_path_cannot_check_exit_2() -> None:
    result = runner.invoke(app, ["contracts", "lint", "/nonexistent/contracts"])
    assert result.exit_code == 2
    assert "no such file or directory" in result.output


def test_cli_lint_unreadable_file_cannot_check_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"id: caf\xe9\n")  # not UTF-8: it cannot be read as a document
    result = runner.invoke(app, ["contracts", "lint", str(path)])
    assert result.exit_code == 2, result.output
    assert "cannot read" in result.output
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(app, ["contracts", "lint", str(empty)])
    assert result.exit_code == 2, result.output
    assert "no contract files found" in result.output


def test_cli_lint_a_skill_not_signed_yet_passes_and_says_unsigned(tmp_path: Path) -> None:
    """docs/skills.md, "Publishing your own skill", step 1: a manifest without hashes lints."""
    skill = tmp_path / "my-skill"
    shutil.copytree(CONTRACTS / "stripe", skill)
    (skill / "skill.sig").unlink()
    manifest = yaml.safe_load((skill / "skill.yaml").read_text(encoding="utf-8"))
    for entry in manifest["contracts"]:
        entry.pop("sha256")
    (skill / "skill.yaml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    result = runner.invoke(app, ["contracts", "lint", str(skill)])
    assert result.exit_code == 0, result.output
    assert f"note: {skill / 'skill.yaml'}: unsigned (no sha256 recorded for" in result.output
    assert "no skill.sig" in result.output
    result = runner.invoke(app, ["contracts", "lint", "--json", str(skill)])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["errors"] == []
    assert len(payload["unsigned"]) == 1
