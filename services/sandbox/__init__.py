"""A stateful Stripe sandbox with faults on demand (issue 4).

Modules: ``forms`` (Stripe's bracketed form encoding), ``params`` (parameter rules and their
errors), ``model`` (charges, refunds and their lifecycle, events, endpoints, deliveries, the
sandbox clock), ``shapes`` (every field the ``stripe`` library declares, filled in),
``payments`` (customers, PaymentIntents, captures), ``expand`` (``expand[]``), ``search``
(Stripe's search query language), ``delivery`` (signing and the async dispatcher), ``store``
(the atomic ``--state`` file), ``stripe`` (the ASGI app: ``create_app``), ``runner`` (serve it in a
background thread), ``client`` (control API client).

Errors::

    Exception
    ├── StripeError       an API answer in Stripe's error envelope (status, type, code, param)
    ├── StateFileError    the --state file cannot be read as a sandbox state
    └── SandboxControlError  (client) the control API refused a call
"""
