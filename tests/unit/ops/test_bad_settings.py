"""A bad ``PROVELY_*`` variable: every command says which and why, exits 2, no traceback."""

from __future__ import annotations

import os
import subprocess

import pytest
from pydantic import BaseModel, ValidationError

from services.cli.spawn import provely_argv
from shared.runtime.settings import Settings, settings_problems


@pytest.mark.parametrize(
    "command",
    [("demo",), ("up",), ("serve", "sweeper"), ("db", "upgrade"), ("config", "show")],
)
def test_a_bad_setting_is_named_for_every_command(command: tuple[str, ...]) -> None:
    env = dict(os.environ, PROVELY_SWEEPER_INTERVAL_SECONDS="soon", PROVELY_LOG_JSON="maybe")
    run = subprocess.run(
        provely_argv(*command), env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert "error: invalid configuration: PROVELY_SWEEPER_INTERVAL_SECONDS:" in run.stderr
    assert "PROVELY_LOG_JSON:" in run.stderr


def test_problems_are_said_only_of_the_settings() -> None:
    with pytest.raises(ValidationError) as settings_error:
        Settings(sweeper_grace_seconds="later")  # type: ignore[arg-type]
    assert settings_problems(settings_error.value) == (
        "PROVELY_SWEEPER_GRACE_SECONDS: Input should be a valid number, unable to parse string "
        "as a number"
    )

    class Other(BaseModel):
        n: int

    with pytest.raises(ValidationError) as other_error:
        Other(n="x")  # type: ignore[arg-type]
    assert settings_problems(other_error.value) is None
