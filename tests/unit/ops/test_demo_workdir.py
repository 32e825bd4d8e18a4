"""The demo's temporary data directory: removed after a run that passed, kept (with the
services' logs) after one that failed or when asked."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import typer

from services.cli.demo.command import _data_dir


def test_a_temporary_directory_is_removed_after_a_run_that_passed() -> None:
    with _data_dir(None, keep=False) as workdir:
        (workdir.path / "logs").mkdir()
        assert workdir.path.is_dir()
    assert not workdir.path.exists()


def test_a_failed_run_keeps_its_directory_even_as_the_command_exits() -> None:
    seen: list[Path] = []

    def failing_run() -> None:
        with _data_dir(None, keep=False) as workdir:
            seen.append(workdir.path)
            (workdir.path / "logs").mkdir()
            workdir.keep = True  # what the demo does when a scenario or the system failed
            raise typer.Exit(1)

    with pytest.raises(typer.Exit):
        failing_run()
    try:
        assert (seen[0] / "logs").is_dir()
    finally:
        shutil.rmtree(seen[0])


def test_keep_keeps_the_temporary_directory() -> None:
    with _data_dir(None, keep=True) as workdir:
        pass
    try:
        assert workdir.path.is_dir()
    finally:
        shutil.rmtree(workdir.path)


def test_a_given_directory_is_created_and_never_removed(tmp_path: Path) -> None:
    given = tmp_path / "mine"
    with _data_dir(given, keep=False) as workdir:
        assert workdir.path == given
        assert given.is_dir()
    assert given.is_dir()
