"""A stateful Stripe sandbox with faults on demand.

Modules: ``forms`` (Stripe's bracketed form encoding), ``params`` (parameter rules and their
errors), ``objects`` (ids, the public view of a stored object), ``settings`` (settings, faults,
outcomes), ``clock`` (the sandbox clock), ``state`` (the tables, the ``--state`` format, lookup,
rendering), ``listing`` (list envelopes), ``events`` (events and their deliveries),
``endpoints`` (webhook endpoints), ``charges``, ``refunds`` (refunds and their lifecycle),
``checkout`` (checkout sessions), ``model`` (the ``Sandbox`` of them all), ``shapes`` (every
field the ``stripe`` library declares, filled in), ``payments`` (customers, PaymentIntents,
captures), ``expand`` (``expand[]``), ``search`` (Stripe's search query language), ``delivery``
(signing and the async dispatcher), ``store`` (the atomic ``--state`` file), ``runtime``
(dispatcher, state file and ticker of a running app), ``wire`` (Stripe's wire format around a
``/v1`` handler), ``v1`` (the ``/v1`` routes), ``control`` (the ``/_sandbox`` routes),
``stripe`` (the ASGI app: ``create_app``), ``runner`` (serve it in a background thread),
``client`` (control API client).

Errors::

    Exception
    ├── StripeError       an API answer in Stripe's error envelope (status, type, code, param)
    ├── StateFileError    the --state file cannot be read as a sandbox state
    └── SandboxControlError  (client) the control API refused a call

May import: its libraries (Starlette, httpx) and nothing of ``shared`` or another service: it
stands in for the provider, so it knows nothing of Provely.
"""
