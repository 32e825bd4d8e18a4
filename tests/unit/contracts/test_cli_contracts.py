"""``provely contracts list|show|hash|render`` on the shipped registry."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from services.cli.main import app
from shared.core.contract import Contract, contract_hash
from tests.unit.contracts.helpers import SUCCEEDED, contract_data

runner = CliRunner()


def test_show_prints_the_contract_with_its_hash() -> None:
    result = runner.invoke(app, ["contracts", "show", "stripe.refund.succeeded"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    expected = contract_hash(Contract.model_validate(contract_data(SUCCEEDED)))
    assert doc["hash"] == expected
    assert doc["id"] == "stripe.refund.succeeded"
    assert doc["loaded"]["certification"] == "community"
    assert doc["loaded"]["file"].endswith("contracts/stripe/refund.succeeded.yaml")
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
    assert result.stdout.startswith("# stripe.refund.succeeded 1.0.0\n")
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
    assert [line.split("\t")[:2] for line in lines] == [
        ["stripe.refund.created", "1.0.0"],
        ["stripe.refund.succeeded", "1.0.0"],
    ]
