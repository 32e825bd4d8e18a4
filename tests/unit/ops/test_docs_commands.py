"""Every ``provely`` command shown in a code block of README.md or docs/ is one the CLI takes.

Each command line of every block (continuations joined, comments dropped, inside ``$(…)``
and after pipes too) is parsed by the real command tree down to its leaf command, options
and arguments included, as the shell would hand it over: a renamed command, a removed option
or a missing argument fails here. Blocks that are run as written have their own tests: the
README's session with curl (tests/e2e/test_readme_session.py), docs/skills.md's "Commands"
(tests/unit/contracts/test_docs_skills.py), the alerting rules (test_docs_metrics.py) and the
settings tables (test_settings_doc.py).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.unit.ops.test_compose import UsageError, resolve_cli

REPO = Path(__file__).resolve().parents[3]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL = {"", "bash", "sh", "shell", "console"}
# A synopsis' optional part, "[--keys FILE|URL]" or "[--workspace W2 …]": take it, with the
# first of the alternatives and without the ellipsis.
OPTIONAL = re.compile(r"\[(--[^\]|]+)(?:\|[^\]]*)?\]")


def _shell_blocks(text: str) -> list[str]:
    """The fenced blocks in a shell language (or none), fence by fence."""
    blocks: list[str] = []
    current: list[str] | None = None
    language = ""
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current, language = [], line[3:].strip()
            else:
                if language in SHELL:
                    blocks.append("\n".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def _commands(text: str) -> list[str]:
    found = []
    for block in _shell_blocks(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            code = re.split(r"\s#\s|\s#$|^#", line, maxsplit=1)[0]
            code = OPTIONAL.sub(r"\1", code).replace(" …", "")
            for match in re.finditer(r"(?:^|\$\(|\||&&|;)\s*(provely\s[^|;)&<>]*)", code):
                found.append(match.group(1).strip())
    return found


CASES = [
    (page.relative_to(REPO).as_posix(), command)
    for page in PAGES
    for command in _commands(page.read_text(encoding="utf-8"))
]


def test_the_docs_show_provely_commands() -> None:
    assert len(CASES) >= 25


@pytest.mark.parametrize(("page", "command"), CASES, ids=[f"{p}: {c}" for p, c in CASES])
def test_every_documented_command_parses(page: str, command: str) -> None:
    args = shlex.split(command)[1:]
    try:
        resolve_cli(args)
    except UsageError as exc:
        pytest.fail(f"{page}: `{command}` is not a command provely takes: {exc}")


def test_the_check_catches_a_command_the_cli_does_not_take() -> None:
    text = (
        "```yaml\nx: 1\n```\n\n"
        "```bash\nprovely contracts lnt x   # a typo\nprovely up --prot 1\n```\n"
    )
    commands = _commands(text)
    assert commands == ["provely contracts lnt x", "provely up --prot 1"]
    for command in commands:
        with pytest.raises(UsageError):
            resolve_cli(shlex.split(command)[1:])
