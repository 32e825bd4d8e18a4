"""Static checks of contracts and skill manifests: parsed data in, a list of ``LintError`` out.

The CLI (``provely contracts lint``), the registry and the HTTP API (``POST /v1/contracts``)
all report through these functions, so a mistake reads the same everywhere::

    contracts/x.yaml: stripe.refund.succeeded: channels[0].http.path: unknown root $foo

Schema errors (pydantic) come first, in the same format; when a document does not validate,
the semantic checks do not run, since they need the model. Pure: no I/O, no clock.

Modules:

- ``findings``  ``LintError``, one finding; pydantic's errors in the same format
- ``document``  one parsed file: a contract validated and linted, or a skill manifest
- ``contract``  the semantic checks of a validated contract, section by section
- ``operands``  the checks of a contract's expressions, operands and readback parameters
- ``skill``     the checks of a skill manifest and of the readback paths its skill declares
"""
