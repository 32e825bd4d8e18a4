"""The MCP server (``provely mcp``): Provely's tools for an LLM agent, on the official ``mcp``
SDK (``MCPServer``), over stdio or streamable HTTP.

It *proves*, it never *acts*: every tool calls Provely's own HTTP API through the Python SDK
(``provely_sdk``) with the caller's workspace API key — the same validation, the same views,
the same errors as the API — and no tool calls a provider. Each tool's description states
the rules an LLM must keep; each answer carries the retry guidance in words and in fields.

Modules: ``texts`` (the words: instructions, tool descriptions, the prompt), ``answers``
(an operation or an API error as a tool's answer), ``server`` (the tools, the contract
pages as resources, the prompt), ``http`` (the streamable HTTP app: API key and host checks).

Errors: a refused call is a :class:`mcp.server.mcpserver.exceptions.ToolError` whose text
is the API's problem (kind, detail and each invalid field); the SDK answers it to the client
as a tool error (``isError``), never as a crash.

May import: the ``mcp`` SDK and ``provely_sdk``; no other service and nothing of ``shared``:
the API is its only way in.
"""
