"""The command line, ``provely``: start and run a system, and talk to its API.

It owns the commands and their one-line errors and exit codes (0 ok, 1 failure, 2 usage or bad
input; README): ``main`` parses and dispatches; ``serve``, ``workers``, ``up``, ``supervisor``,
``spawn`` and ``service_process`` run the ingress, the workers and the sweeper; ``system``,
``preflight``, ``config``, ``db`` and ``admin`` manage a data directory and its database;
``operations``, ``receipts``, ``deliveries``, ``contracts``, ``skills``, ``audit`` and
``connection_check`` are the commands an operator reads with; ``sandbox``, ``demo``,
``embedded``, ``mcp`` start the sandbox, the demo, the embedded system and the MCP server.

Errors::

    Exception
    ├── NoSystemError       (system) no system in the data directory: exit 2
    ├── ProviderUnreadable  (endpoint_versions) a provider's endpoint settings cannot be read
    └── SupervisorError     (supervisor, a RuntimeError) a child process would not start or stay

Each is one line on stderr and an exit code, never a traceback.

May import: ``shared`` and every other service (it is the top: it starts them); nothing
imports it (``pyproject.toml``'s import contract ``cli-on-top``).
"""
