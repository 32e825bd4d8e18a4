"""The HTTP ingress: the agent API, the webhook intake and the documentation, in one ASGI app.

It owns what crosses HTTP into Provely: parsing and checking requests, the answers (the
operation resource, receipts, contract pages) and their OpenAPI document, and the deliveries
of providers' webhooks up to the point where ``shared.intake`` stores them. It decides nothing
itself: it calls ``shared.lifecycle`` to create and change operations, ``shared.intake`` to
store and correlate events, and sends the workers their messages after commit.

Packages and modules, by concern:

- ``api`` — the agent API: ``operations`` (the ``/v1/operations`` routes), ``creation``,
  ``actions``, ``review``, ``lookup`` (what those routes do), ``receipts``, ``contracts``,
  ``custom_contracts``, ``deliveries``, ``views`` (how rows are shown), ``answers``, ``schemas``,
  ``examples``, ``bodies``, ``inputs`` (what a request carries);
- ``intake`` — the webhook intake: ``webhooks`` (``POST /v1/events/{provider}/{workspace}``),
  ``webhook_checks``, ``webhook_batches`` (group commit), ``correlate_messages``;
- what the whole app shares, at the top: ``app`` (``create_app``), ``server`` (uvicorn and its
  limits), ``access`` (the access log), ``deps`` (settings, engine, clock, API key),
  ``problems``, ``request_checks``, ``docs_ui``.

A face of its own (published pages, a console) is a package beside ``api`` and ``intake``;
``app`` only includes its routes. The packages import what is at the top, never each other.

Errors::

    Exception
    ├── ApiError        (problems) an expected refusal: status, problem type, detail, fields;
    │                   the one handler answers it as RFC 9457 problem+json
    ├── NotFound        (intake.webhook_checks) no usable connection for a delivery's
    │                   workspace and provider
    └── BodyTooLarge    (intake.webhooks) a delivery over the size limit
    HTTPException
    └── UnstorableBody  (api.bodies) a JSON body nested too deep to parse: a 422

Any other exception is a bug: ``problems`` answers it as a 500 problem without a traceback.

May import: ``shared`` and its libraries (FastAPI, SQLAlchemy, Celery's client side); never
another service (``pyproject.toml``'s import contract).
"""
