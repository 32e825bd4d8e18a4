"""The webhook intake of the ingress: ``POST /v1/events/{provider}/{workspace}``, no API key.

It owns a delivery from its first byte to its answer: ``webhooks`` (a raw ASGI handler in front
of FastAPI, with its own body limit), ``webhook_checks`` (the connection, the signature on the
exact bytes, the event parsed by the skill's event shape — before anything is stored),
``webhook_batches`` (deliveries that arrive together share one transaction; each is answered
after it commits) and ``correlate_messages`` (one ``provely.correlate`` for the batches
committed meanwhile). Storing and correlating are ``shared.intake``'s.

Errors: ``NotFound`` (``webhook_checks``: no usable connection for the workspace and
provider) and ``BodyTooLarge`` (``webhooks``: the body passed the configured limit); a refused
delivery leaves only its metadata (``shared.intake.refusals``).

May import: ``shared``, and the top of the ingress (``problems``); not ``api``.
"""
