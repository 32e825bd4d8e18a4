"""docs/skills.md's "Commands" block, run as it is written: on a scratch copy of a skill, with
a key made for the run, leaving the shipped skills (contracts/) exactly as they were."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "skills.md"


def _commands_block() -> str:
    section = DOC.read_text(encoding="utf-8").split("## Commands\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    return block


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_the_skills_commands_run_verbatim_and_leave_the_checkout_alone() -> None:
    before = _tree(REPO / "contracts")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", _commands_block()],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("ok: skill stripe") == 2, run.stdout
    assert _tree(REPO / "contracts") == before
