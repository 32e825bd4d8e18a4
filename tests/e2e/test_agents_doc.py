"""docs/agents.md's example, run as it is written against ``provely up`` and ``provely sandbox
stripe`` started as a user starts them: it must print VERIFIED and a valid receipt line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_readme_session import running

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
__all__ = ["running"]  # the fixture, shared with the README's session test


def agents_example() -> str:
    text = (REPO / "docs" / "agents.md").read_text(encoding="utf-8")
    section = text.split("## A refund, proven\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, "the section must hold exactly one python block"
    return blocks[0]


def test_the_example_is_ten_lines_or_fewer_after_its_imports() -> None:
    lines = [line for line in agents_example().splitlines() if line.strip()]
    code = [line for line in lines if not line.startswith(("import ", "from "))]
    assert len(code) <= 10, code


def test_the_agents_example_runs_verbatim(running: tuple[Path, dict[str, str]]) -> None:
    home, env = running
    api, sandbox = env["API"], env["SANDBOX"]

    def provely(*args: str) -> str:
        done = subprocess.run(
            ["provely", *args], cwd=home, env=env, capture_output=True, text=True, check=True
        )
        return done.stdout

    workspace = json.loads(provely("workspace", "create", "agents-doc"))
    stripe_key = "sk_test_demo"
    endpoint = httpx.post(
        f"{sandbox}/v1/webhook_endpoints",
        auth=(stripe_key, ""),
        data={
            "url": f"{api}/v1/events/stripe/{workspace['workspace_id']}",
            "enabled_events[]": "*",
        },
    ).json()
    provely("connection", "set", "--workspace", workspace["workspace_id"], "--provider",
            "stripe", "--webhook-secret", endpoint["secret"], "--api-key", stripe_key,
            "--base-url", sandbox)  # fmt: skip
    charge = httpx.post(
        f"{sandbox}/v1/charges", auth=(stripe_key, ""), data={"amount": 5000, "currency": "usd"}
    ).json()["id"]
    run = subprocess.run(
        [sys.executable, "-c", agents_example()],
        cwd=home,
        env={**env, "PROVELY_URL": api, "PROVELY_API_KEY": workspace["api_key"],
             "STRIPE_KEY": stripe_key, "STRIPE_URL": sandbox, "CHARGE": charge},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith("VERIFIED all_conditions_hold - "), run.stdout
    assert lines[1].startswith("valid: receipt rcpt_"), run.stdout
