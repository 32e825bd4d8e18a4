"""``provely contracts list|show|hash|render`` on the shipped registry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli.main import app
from shared.core.contract import Contract, contract_hash
from tests.unit.contracts.helpers import (
    SUCCEEDED,
    SUCCEEDED_1_1,
    SUCCEEDED_1_2,
    contract_data,
    newest_file,
    shipped_files,
    shipped_versions,
)

runner = CliRunner()


@pytest.mark.parametrize(
    ("version", "file"),
    [
        (None, newest_file("stripe.refund.succeeded")),
        ("1.2.0", SUCCEEDED_1_2),
        ("1.1.0", SUCCEEDED_1_1),
        ("1.0.0", SUCCEEDED),
    ],
)
def test_show_prints_the_contract_with_its_hash(version: str | None, file: Path) -> None:
    args = ["contracts", "show", "stripe.refund.succeeded"]
    result = runner.invoke(app, args + (["--version", version] if version else []))
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    expected = contract_hash(Contract.model_validate(contract_data(file)))
    assert doc["hash"] == expected
    assert doc["id"] == "stripe.refund.succeeded"
    assert doc["loaded"]["certification"] == "community"
    assert doc["loaded"]["file"].endswith(f"contracts/stripe/{file.name}")
    body = {k: v for k, v in doc.items() if k not in ("hash", "loaded")}
    assert contract_hash(Contract.model_validate(body)) == expected


def test_show_unknown_contract_and_version() -> None:
    result = runner.invoke(app, ["contracts", "show", "stripe.refund.nothing"])
    assert result.exit_code == 1
    assert "error: unknown contract stripe.refund.nothing" in result.output
    result = runner.invoke(
        app, ["contracts", "show", "stripe.refund.succeeded", "--version", "9.9.9"]
    )
    assert result.exit_code == 1
    assert "has no version 9.9.9" in result.output


def test_hash_of_a_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["contracts", "hash", str(SUCCEEDED)])
    assert result.exit_code == 0
    assert result.stdout.strip() == contract_hash(Contract.model_validate(contract_data(SUCCEEDED)))
    broken = tmp_path / "b.yaml"
    broken.write_text("id: x\n")
    result = runner.invoke(app, ["contracts", "hash", str(broken)])
    assert result.exit_code == 1
    assert f"{broken}: x: version: required field is missing" in result.output


def test_render_prints_the_page_and_writes_a_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["contracts", "render", "stripe.refund.succeeded"])
    assert result.exit_code == 0, result.output
    newest = shipped_versions("stripe.refund.succeeded")[-1]
    assert result.stdout.startswith(f"# stripe.refund.succeeded {newest}\n")
    assert "| Skill | [Stripe 0.1.0](/verify/stripe) |" in result.stdout
    out = tmp_path / "page.md"
    result = runner.invoke(
        app,
        ["contracts", "render", "stripe.refund.created", "--version", "1.0.0", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "| Completion level | `created` |" in out.read_text()


def test_list() -> None:
    result = runner.invoke(app, ["contracts", "list"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    stripe = [[cid, v] for cid, versions in sorted(shipped_files().items()) for v in versions]
    assert [line.split("\t")[:2] for line in lines] == [
        ["app.entitlement.revoked", "1.0.0"],
        *stripe,
    ]
    assert ["stripe.refund.succeeded", "1.2.0"] in stripe


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Settings and registry caches cleared before and after (they are read from the env)."""
    from shared.runtime.settings import get_settings
    from shared.trust.registry import get_registry

    get_settings.cache_clear()
    get_registry.cache_clear()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()
    get_registry.cache_clear()


def test_registry_failure_is_a_clear_message_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_registry: None
) -> None:
    loose = tmp_path / "mine.yaml"
    loose.write_bytes(SUCCEEDED.read_bytes())
    monkeypatch.setenv("PROVELY_CONTRACT_PATHS", str(tmp_path))
    for args in (
        ["list"],
        ["show", "stripe.refund.succeeded"],
        ["render", "stripe.refund.created"],
    ):
        result = runner.invoke(app, ["contracts", *args])
        assert result.exit_code == 1
        assert f"{loose}: not listed in a signed skill manifest" in result.output
        assert "error: contracts could not be loaded" in result.output
        assert "Traceback" not in result.output


def test_allow_unsigned_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_registry: None
) -> None:
    data = contract_data(SUCCEEDED)
    data["version"] = "1.9.0"
    (tmp_path / "mine.json").write_text(json.dumps(data, default=str))
    monkeypatch.setenv("PROVELY_CONTRACT_PATHS", str(tmp_path))
    monkeypatch.setenv("PROVELY_ALLOW_UNSIGNED_SKILLS", "true")
    result = runner.invoke(app, ["contracts", "show", "stripe.refund.succeeded"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["version"] == "1.9.0"
    assert doc["loaded"]["certification"] == "unsigned"
    result = runner.invoke(app, ["contracts", "render", "stripe.refund.succeeded"])
    assert "| Certification | Unsigned |" in result.stdout
    result = runner.invoke(
        app, ["contracts", "show", "stripe.refund.succeeded", "--version", "1.0.0"]
    )
    assert json.loads(result.stdout)["loaded"]["certification"] == "community"
