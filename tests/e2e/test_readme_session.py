"""The README's "A session with curl", run as it is written, against ``provely up`` and
``provely sandbox stripe`` as a user starts them (on free ports: the block reads ``API`` and
``SANDBOX`` with the documented ports as defaults). A README command that stops working fails
this test, so the page cannot rot."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from services.cli.spawn import free_port, provely_argv

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def readme_session() -> str:
    """The shell block of the README's "A session with curl" section, verbatim."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## A session with curl\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, "the section must hold exactly one sh block"
    return blocks[0]


def _wait_http(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 90
    while True:
        assert process.poll() is None, log.read_text(errors="replace")[-4000:]
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, log.read_text(errors="replace")[-4000:]
        time.sleep(0.2)


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """``provely up`` and ``provely sandbox stripe`` started in a fresh directory, as a user
    would in theirs; yields the directory and the environment of the user's shell."""
    home = tmp_path / "user"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    api_port, sandbox_port = free_port(), free_port()
    processes: list[subprocess.Popen[bytes]] = []
    logs = {name: tmp_path / f"{name}.log" for name in ("up", "sandbox")}
    commands = {
        "up": provely_argv("up", "--port", str(api_port)),
        "sandbox": provely_argv("sandbox", "stripe", "--port", str(sandbox_port)),
    }
    try:
        for name, argv in commands.items():
            with logs[name].open("ab") as log:
                processes.append(
                    subprocess.Popen(
                        argv,
                        cwd=home,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        _wait_http(f"http://127.0.0.1:{api_port}/healthz", processes[0], logs["up"])
        _wait_http(f"http://127.0.0.1:{sandbox_port}/v1/charges", processes[1], logs["sandbox"])
        yield (
            home,
            {
                **env,
                "API": f"http://127.0.0.1:{api_port}",
                "SANDBOX": f"http://127.0.0.1:{sandbox_port}",
            },
        )
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)
        for process in processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def test_the_readme_block_only_reads_ports_from_the_environment() -> None:
    block = readme_session()
    assert "API=${API:-http://127.0.0.1:8080}" in block
    assert "SANDBOX=${SANDBOX:-http://127.0.0.1:12111}" in block
    code = "\n".join(line.split("  #", 1)[0] for line in block.splitlines())
    assert "…" not in code  # no id to paste by hand: the commands capture them
    assert "> receipt.json" not in code  # nothing written into the checkout


def test_the_readme_curl_session_runs_verbatim(running: tuple[Path, dict[str, str]]) -> None:
    home, env = running
    before = set(home.iterdir())
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", readme_session()],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert "VERIFIED" in lines, run.stdout[-3000:]
    assert any(line.startswith("valid: receipt rcpt_") for line in lines), run.stdout[-3000:]
    # The scratch files went to a temporary directory, not where the user stands.
    assert set(home.iterdir()) == before


OTHER_VERSION = "2025-03-31.basil"


def session_on_another_version(block: str) -> str:
    """The README block with its endpoint created on another API version (as a real account's
    default would be), up to the action report, then a bounded wait for what the operation
    says instead of the README's unbounded PENDING loop."""
    endpoint = "-d url=$API/v1/events/stripe/$WS -d 'enabled_events[]=*'"
    assert endpoint in block, "the README creates its endpoint differently now"
    changed = block.replace(endpoint, f"{endpoint} -d api_version={OTHER_VERSION}")
    head = changed.split("\nwhile ", 1)[0]
    return head + (
        "\nfor _ in $(seq 1 90); do\n"
        '  BLOCKED=$(curl -s $API/v1/operations/$OP -H "Authorization: Bearer $KEY" '
        "| field blocked_by)\n"
        '  [ "$BLOCKED" != None ] && break\n'
        "  sleep 1\n"
        "done\n"
        'curl -s $API/v1/operations/$OP -H "Authorization: Bearer $KEY" | field verdict\n'
        'echo "blocked_by: $BLOCKED"\n'
        'provely connection check --workspace $WS || echo "check exit $?"\n'
    )


def test_the_readme_session_on_another_api_version_names_the_version(
    running: tuple[Path, dict[str, str]],
) -> None:
    """The README session with one change — the endpoint created on another Stripe API
    version — ends with an answer that names the version, not a silent PENDING (#33)."""
    home, env = running
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", session_on_another_version(readme_session())],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert "PENDING" in lines, run.stdout[-3000:]
    blocked = [line for line in lines if line.startswith("blocked_by: ")]
    assert blocked, run.stdout[-3000:]
    assert f"api_version {OTHER_VERSION} is not among 2026-08-26" in blocked[0], blocked
    assert "events ignored" in blocked[0] or "event ignored" in blocked[0]
    # connection set warned, and connection check names the endpoint and exits 1.
    assert f"sends api_version {OTHER_VERSION}" in run.stderr, run.stderr[-3000:]
    assert "check exit 1" in lines, run.stdout[-3000:]
