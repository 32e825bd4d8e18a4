"""`provely receipts verify FILE --keys FILE|URL`: exit 0 valid, 1 tampered, 2 cannot check."""

from __future__ import annotations

import copy
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from services.cli.main import app
from shared.core.receipt import document_bytes
from shared.lifecycle.receipt_keyring import b64url_decode_strict, b64url_encode
from tests.unit.receipts.factory import changed, get_at, leaves, sample_body, set_at
from tests.unit.receipts.test_signing import KEY, OTHER, key_entry, signed

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": [key_entry(OTHER), key_entry(KEY, "retired")]}))
    return path


def write(tmp_path: Path, document: Any, name: str = "receipt.json") -> Path:
    path = tmp_path / name
    path.write_bytes(document_bytes(document))
    return path


def test_valid_receipt_signed_by_a_retired_key_exits_0(tmp_path: Path, keys_file: Path) -> None:
    path = write(tmp_path, signed(sample_body()))
    code, out, err = run("receipts", "verify", str(path), "--keys", str(keys_file))
    assert code == 0, err
    assert out.startswith("valid: receipt rcpt_")
    assert "retired" in out
    body = signed(sample_body())["receipt"]
    claim = str(body["safe_to_claim_complete"]).lower()
    level = body["contract"]["completion_level"]
    # What the receipt lets anyone claim, as the operation resource says it.
    assert f"completion level {level}, safe_to_claim_complete={claim}" in out
    assert out.count("\n") == 1


def test_every_flipped_leaf_exits_1(tmp_path: Path, keys_file: Path) -> None:
    original = signed(sample_body())
    paths = leaves(original["receipt"])
    assert len(paths) > 40
    for path in paths:
        document = copy.deepcopy(original)
        set_at(document["receipt"], path, changed(path, get_at(document["receipt"], path)))
        file = write(tmp_path, document)
        code, _, err = run("receipts", "verify", str(file), "--keys", str(keys_file))
        assert code == 1, f"{path}: {err}"
        assert err.startswith("tampered: ")


def test_every_flipped_signature_byte_exits_1(tmp_path: Path, keys_file: Path) -> None:
    original = signed(sample_body())
    raw = b64url_decode_strict(original["signature"]) or b""
    for index in range(len(raw)):
        changed = bytearray(raw)
        changed[index] ^= 0x80
        file = write(tmp_path, original | {"signature": b64url_encode(bytes(changed))})
        code, _, _ = run("receipts", "verify", str(file), "--keys", str(keys_file))
        assert code == 1, index


def test_unknown_key_exits_2(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    keys = tmp_path_factory.mktemp("k") / "keys.json"
    keys.write_text(json.dumps({"keys": [key_entry(OTHER)]}))
    file = write(tmp_path, signed(sample_body()))
    code, _, err = run("receipts", "verify", str(file), "--keys", str(keys))
    assert code == 2
    assert err.startswith("unknown key ")


@pytest.mark.parametrize("content", [b"", b"{", b"[1]", b'{"receipt": {}}', b"\xff", b'{"a": NaN}'])
def test_malformed_file_exits_2(tmp_path: Path, keys_file: Path, content: bytes) -> None:
    file = tmp_path / "bad.json"
    file.write_bytes(content)
    code, _, err = run("receipts", "verify", str(file), "--keys", str(keys_file))
    assert code == 2
    assert err.startswith("malformed receipt: ")
    assert err.count("\n") == 1


def test_missing_receipt_or_key_file_exits_2(tmp_path: Path, keys_file: Path) -> None:
    code, _, err = run("receipts", "verify", str(tmp_path / "nope.json"), "--keys", str(keys_file))
    assert code == 2
    assert err.startswith("cannot read receipt")
    file = write(tmp_path, signed(sample_body()))
    code, _, err = run("receipts", "verify", str(file), "--keys", str(tmp_path / "nope.json"))
    assert code == 2
    assert err.startswith("cannot read key list")
    bad_keys = tmp_path / "bad-keys.json"
    bad_keys.write_text('{"keys": 3}')
    code, _, err = run("receipts", "verify", str(file), "--keys", str(bad_keys))
    assert code == 2
    assert err.startswith("unreadable key list")


def test_json_output(tmp_path: Path, keys_file: Path) -> None:
    file = write(tmp_path, signed(sample_body(supersedes="rcpt_old")))
    code, out, _ = run("receipts", "verify", str(file), "--keys", str(keys_file), "--json")
    assert code == 0
    answer = json.loads(out)
    assert answer["result"] == "valid"
    assert answer["exit_code"] == 0
    assert answer["supersedes"] == "rcpt_old"
    assert answer["key_status"] == "retired"
    document = signed(sample_body())
    document["receipt"]["verdict"] = "FAILED"
    code, out, _ = run(
        "receipts", "verify", str(write(tmp_path, document)), "--keys", str(keys_file), "--json"
    )
    assert code == 1
    assert json.loads(out)["result"] == "tampered"


@pytest.fixture
def key_server(keys_file: Path) -> Iterator[str]:
    body = keys_file.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/v1/receipts/keys":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)
            else:
                self.send_response(404)
                self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()


def test_keys_from_url(tmp_path: Path, key_server: str) -> None:
    file = write(tmp_path, signed(sample_body()))
    code, _out, err = run(
        "receipts", "verify", str(file), "--keys", f"{key_server}/v1/receipts/keys"
    )
    assert code == 0, err
    code, _, err = run("receipts", "verify", str(file), "--keys", f"{key_server}/missing")
    assert code == 2
    assert "HTTP 404" in err


def test_keys_url_that_does_not_answer_exits_2(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    file = write(tmp_path, signed(sample_body()))
    code, _, err = run("receipts", "verify", str(file), "--keys", f"http://127.0.0.1:{port}/k")
    assert code == 2
    assert err.startswith("cannot fetch the key list")


def test_console_script_end_to_end(tmp_path: Path, keys_file: Path) -> None:
    """The installed `provely` command itself, in its own process."""
    script = shutil.which("provely", path=str(Path(sys.executable).parent))
    assert script is not None
    good = write(tmp_path, signed(sample_body()), "good.json")
    document = signed(sample_body())
    document["receipt"]["evidence"][0]["digest"] = "0" * 64
    bad = write(tmp_path, document, "bad.json")
    for file, expected in ((good, 0), (bad, 1)):
        done = subprocess.run(
            [script, "receipts", "verify", str(file), "--keys", str(keys_file)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == expected, done.stderr
        assert "Traceback" not in done.stderr
    done = subprocess.run(
        [script, "receipts", "verify", "-", "--keys", str(keys_file)],
        input=good.read_text(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_without_keys_and_without_a_local_database_exits_2(tmp_path: Path) -> None:
    """No --keys and no database: a clear answer, and no database file created on the way."""
    file = write(tmp_path, signed(sample_body()))
    script = shutil.which("provely", path=str(Path(sys.executable).parent))
    assert script is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
    env["PROVELY_DATA_DIR"] = str(tmp_path / "data")
    done = subprocess.run(
        [script, "receipts", "verify", str(file)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("no Provely system here: ")
    assert not (tmp_path / "data").exists()
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    done = subprocess.run(
        [script, "receipts", "verify", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("malformed receipt: ")
