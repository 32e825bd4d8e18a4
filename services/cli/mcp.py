"""``provely mcp``: the MCP server for LLM agents (``services.mcp_server``), over stdio (the
default: an MCP client launches it) or streamable HTTP. It talks to a running Provely API and
never to a provider."""

from __future__ import annotations

import importlib.util
import os
from typing import Annotated, Literal

import typer

__all__ = ["register"]

Transport = Literal["stdio", "http"]


def register(app: typer.Typer) -> None:
    """Add ``provely mcp`` to the root app."""

    @app.command("mcp")
    def mcp_command(
        transport: Annotated[
            str, typer.Option(help="stdio (an MCP client starts this process) or http.")
        ] = "stdio",
        api_url: Annotated[
            str, typer.Option(envvar="PROVELY_API_URL", help="The Provely API to prove with.")
        ] = "http://127.0.0.1:8080",
        host: Annotated[str, typer.Option(help="http: interface to bind.")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="http: port to listen on.")] = 8090,
        allowed_host: Annotated[
            list[str] | None,
            typer.Option(help="http: an accepted Host header (repeatable); default host:port."),
        ] = None,
    ) -> None:
        """Serve Provely's tools to an LLM agent. stdio reads the workspace API key from
        PROVELY_API_KEY; over http each request brings its own (Authorization: Bearer)."""
        if importlib.util.find_spec("provely_sdk") is None:
            typer.echo(
                "error: provely mcp needs the Python SDK (provely_sdk): install sdk/python "
                "beside Provely (README: installing the wheels)",
                err=True,
            )
            raise typer.Exit(2)
        if transport == "stdio":
            api_key = os.environ.get("PROVELY_API_KEY", "").strip()
            if not api_key:
                typer.echo("error: set PROVELY_API_KEY to the workspace API key", err=True)
                raise typer.Exit(2)
            from services.mcp_server.server import build_server

            build_server(api_url=api_url, api_key=api_key).run("stdio")
        elif transport == "http":
            import uvicorn

            from services.mcp_server.http import create_http_app

            hosts = allowed_host or [f"{host}:{port}", f"localhost:{port}"]
            app = create_http_app(api_url=api_url, allowed_hosts=hosts)
            uvicorn.run(app, host=host, port=port, log_level="warning")
        else:
            typer.echo(f"error: unknown transport {transport!r} (stdio or http)", err=True)
            raise typer.Exit(2)
