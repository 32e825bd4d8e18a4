"""The agent API of the ingress: ``/v1/operations``, ``/v1/contracts``, receipts, deliveries.

It owns the routes an agent (or the SDK, the MCP server, the command line) calls with a
workspace API key, what they do and how they answer: ``operations`` (create, report an action,
verify, review, read) over ``creation``, ``actions``, ``review`` and ``lookup``; ``receipts``;
``contracts`` and ``custom_contracts``; ``deliveries``; the operation resource as ``views``
shows it and ``answers`` serializes it for the hot routes; the bodies (``schemas``, with
``examples`` for the OpenAPI document, ``bodies``, ``inputs``). A route parses, loads, calls
``shared.lifecycle`` and answers; the request owns the transaction (``services.ingress.deps``).

Errors: a refusal is ``services.ingress.problems.ApiError`` (problem+json); ``bodies`` adds
``UnstorableBody`` (a body nested too deeply to parse, answered 422 ``unstorable-value``).

May import: ``shared``, and the top of the ingress (``deps``, ``problems``); not ``intake``.
"""
