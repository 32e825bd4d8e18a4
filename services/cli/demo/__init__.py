"""``provely demo``: the embedded system and Stripe sandboxes, an agent playing the scenarios
against them, and what happens shown live and explained at the end.

``provely demo`` starts the embedded system (as ``provely up`` does, on free ports, in a fresh
temporary data directory unless ``--data-dir``) and Stripe sandboxes, then plays an agent
(:mod:`services.cli.demo.scenarios`): by default one refund that Provely proves, showing the
lifecycle as it happens, the conditions as evaluated and the receipt verified.
``--scenario NAME`` (repeatable) and ``--all`` run the traps concurrently, each with its verdict
and why. Exit 0 only when every verdict is the expected one.

Modules, each importing only those above it:

- ``scenarios``  the scenario engine (a package; it knows nothing of how the system runs)
- ``embedded``   the embedded system plus in-process sandboxes: the demo's ``System``
- ``board``      the live display while the scenarios play
- ``report``     the outcomes at the end: tables, verdict lines, JSON
- ``command``    the ``demo`` command and its data directory; ``register`` adds it to the root
  app (with ``up`` and ``config``)

May import: ``services.cli.up`` and ``services.cli.config`` (the embedded system, the other
commands it registers), ``services.sandbox``, ``shared`` and libraries. Heavy libraries
(``rich``, the system) are imported inside functions so that ``provely --help`` stays fast.
"""
