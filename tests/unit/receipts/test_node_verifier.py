"""A verifier in another language checks a v2 receipt: the Node.js script of docs/receipts.md.

The script (docs/examples/verify-receipt.mjs, shown verbatim in the docs) uses only Node's
built-in crypto and its own few lines of RFC 8785; it runs offline. The receipt holds values
that Python's json.dumps spells differently from JCS, so a receipt signed over the old spelling
would not pass it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from shared.core.contract import canonical_json
from shared.core.receipt import document_bytes, receipt_document
from shared.core.types import ConditionResult
from shared.lifecycle.receipt_keyring import key_id_for, sign_payload
from tests.unit.receipts.factory import sample_body
from tests.unit.receipts.test_signing import KEY, key_entry, signed

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "docs" / "examples" / "verify-receipt.mjs"
DOC = ROOT / "docs" / "receipts.md"


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI"):
            pytest.fail("node is not installed; CI must run the cross-language receipt check")
        pytest.skip("node is not installed")
    return node


def _tricky_body() -> dict[str, Any]:
    return sample_body(
        reason="remboursé — 退款",
        subject={
            "type": "stripe.refund",
            "key": "refund_id",
            "id": "re_123",
            "amount": 2000.0,
            "big": 1e16,
            "tiny": 0.000001,
            "\U0001f600": "non-BMP key",
            "\uffff": "last BMP key",
            "é": "ü",
        },
        conditions=[
            ConditionResult("amount_matches", "completion", True, 2000.0, 2000),
            ConditionResult("fraction", "completion", None, 1e16, [0.1, -0.0, 1e21]),
        ],
    )


def _run(tmp_path: Path, document: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    receipt = tmp_path / "receipt.json"
    receipt.write_bytes(document_bytes(document))
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [key_entry(KEY)]}))
    return subprocess.run(
        [_node(), str(SCRIPT), str(receipt), str(keys)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_docs_show_the_script_that_is_tested() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert "```js\n" + SCRIPT.read_text(encoding="utf-8") + "```" in text


def test_node_verifies_a_v2_receipt(tmp_path: Path) -> None:
    body = _tricky_body()
    assert body["version"] == 2
    done = _run(tmp_path, signed(body))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("valid: receipt rcpt_")


def test_node_catches_tampering(tmp_path: Path) -> None:
    document = signed(_tricky_body())
    document["receipt"]["subject"]["amount"] = 2000.5
    done = _run(tmp_path, document)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("tampered: ")


def test_the_old_spelling_would_not_pass_a_jcs_verifier(tmp_path: Path) -> None:
    # Signed over sorted json.dumps (what v1 did) but labelled v2: JCS bytes differ, so the
    # standard verifier refuses it. This is the incompatibility v2 removes.
    body = _tricky_body()
    document = receipt_document(
        body, signature=sign_payload(KEY, canonical_json(body)), key_id=key_id_for(KEY.public_key())
    )
    done = _run(tmp_path, document)
    assert done.returncode == 1, done.stdout + done.stderr


def test_node_cannot_check_an_unknown_key(tmp_path: Path) -> None:
    document = signed(_tricky_body())
    document["key_id"] = "0" * 16
    assert _run(tmp_path, document).returncode == 2
