"""docker-compose.yml is a valid Compose file and every service runs a real ``provely`` command."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

REPO = Path(__file__).resolve().parents[3]
COMPOSE_FILE = REPO / "docker-compose.yml"
# The public Compose Specification schema, vendored so the suite runs from a plain clone.
SCHEMA_FILE = REPO / "tests" / "data" / "compose-spec.json"


def _compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _command(service: dict[str, Any]) -> list[str] | None:
    command = service.get("command")
    if command is None:
        return None
    if isinstance(command, str):
        return shlex.split(command)
    return [str(part) for part in command]


# typer ships its own copy of click: its usage errors derive from this class.
UsageError = type(typer.BadParameter("x")).__mro__[1]


def resolve_cli(args: list[str]) -> Any:
    """Parse ``args`` (without the program name) down to the leaf command, options included.

    Raises a usage error (``UsageError`` / ``typer.BadParameter``) as the command line would.
    """
    from services.cli.main import app

    command: Any = typer.main.get_command(app)
    ctx = command.make_context("provely", list(args))
    while hasattr(command, "resolve_command"):  # a group: descend into the named subcommand
        rest = [*ctx._protected_args, *ctx.args]
        if not rest:
            raise UsageError("a group needs a subcommand", ctx=ctx)
        name, sub, remaining = command.resolve_command(ctx, rest)
        assert sub is not None
        assert name is not None
        ctx = sub.make_context(name, remaining, parent=ctx)
        command = sub
    return command


def test_schema_file_is_present() -> None:
    if not SCHEMA_FILE.is_file():
        pytest.fail(
            f"the Compose schema is missing at {SCHEMA_FILE} (it ships with the tests)",
            pytrace=False,
        )


def test_compose_file_validates_against_the_compose_spec() -> None:
    import jsonschema

    if not SCHEMA_FILE.is_file():
        pytest.fail(f"the Compose schema is missing at {SCHEMA_FILE}", pytrace=False)
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    errors = sorted(
        jsonschema.Draft7Validator(schema).iter_errors(_compose()), key=lambda e: list(e.path)
    )
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_the_deployment_has_every_service() -> None:
    services = _compose()["services"]
    for name in ("postgres", "redis", "migrate", "ingress", "observer", "verdict", "sweeper"):
        assert name in services, name
    assert "healthcheck" in services["postgres"]
    assert services["sandbox"]["profiles"] == ["sandbox"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("ingress", "observer", "verdict", "sweeper"):
        assert services[name]["depends_on"]["migrate"]["condition"] == (
            "service_completed_successfully"
        )
    # Scalable with --scale: no fixed host port, no fixed container name.
    for name in ("observer", "verdict", "sweeper"):
        assert "ports" not in services[name]
        assert "container_name" not in services[name]
    # One image for every Provely service, built from the repository.
    images = {services[n]["image"] for n, _ in _provely_commands()}
    assert len(images) == 1
    assert all(services[n].get("build") == "." for n, _ in _provely_commands())
    # Configuration only through PROVELY_* variables.
    for name in ("migrate", "ingress", "observer", "verdict", "sweeper"):
        env = services[name]["environment"]
        assert env, name
        assert all(key.startswith("PROVELY_") for key in env), name


def test_workers_consume_their_own_queue() -> None:
    services = _compose()["services"]
    assert _command(services["observer"])[:3] == ["provely", "serve", "observer"]  # type: ignore[index]
    assert _command(services["verdict"])[:3] == ["provely", "serve", "verdict"]  # type: ignore[index]
    assert _command(services["ingress"])[:3] == ["provely", "serve", "ingress"]  # type: ignore[index]
    assert _command(services["migrate"]) == ["provely", "db", "upgrade"]


def _provely_commands() -> list[tuple[str, list[str]]]:
    found = []
    for name, service in _compose()["services"].items():
        command = _command(service)
        if command and command[0] == "provely":
            found.append((name, command))
    return found


@pytest.mark.parametrize(("service", "command"), _provely_commands())
def test_every_service_command_is_a_real_cli_command(service: str, command: list[str]) -> None:
    leaf = resolve_cli(command[1:])
    assert leaf.callback is not None, f"{service}: {command} is not a runnable command"


def test_the_command_check_catches_bad_commands() -> None:
    with pytest.raises(UsageError):
        resolve_cli(["serve", "nonexistent"])
    with pytest.raises(UsageError):
        resolve_cli(["serve", "ingress", "--no-such-option"])
    with pytest.raises(UsageError):
        resolve_cli(["serve"])
    with pytest.raises(typer.BadParameter):
        resolve_cli(["serve", "ingress", "--port", "not-a-number"])


def test_metrics_are_scraped_on_the_network_only_and_the_gauges_exported_once() -> None:
    services = _compose()["services"]
    ingress = _command(services["ingress"]) or []
    assert "--metrics-port" in ingress
    port = ingress[ingress.index("--metrics-port") + 1]
    assert all(not str(p).endswith(f":{port}") for p in services["ingress"].get("ports", []))
    assert _command(services["metrics"])[:3] == ["provely", "serve", "metrics"]  # type: ignore[index]
    assert "ports" not in services["metrics"]
    assert services["metrics"]["environment"]["PROVELY_METRICS_HOST"] == "0.0.0.0"


def test_services_restart_and_workers_have_health_checks() -> None:
    services = _compose()["services"]
    for name in ("postgres", "redis", "ingress", "observer", "verdict", "sweeper"):
        assert services[name]["restart"] in ("unless-stopped", "always", "on-failure"), name
    for role in ("observer", "verdict"):
        check = services[role]["healthcheck"]
        test = [str(part) for part in check["test"]]
        assert test[0] == "CMD"
        assert test[1:5] == ["provely", "serve", "ping", role], test
        leaf = resolve_cli(test[2:])
        assert leaf.callback is not None
        assert check["retries"] >= 1
