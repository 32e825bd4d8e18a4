"""Evidence as a decision sees it: readings of channels, the webhook channel's reduction of
stored events, the consistent view taken at decision time and the locks that make it so.

Modules:

- ``readings`` what a verifier returns: one reading of one channel
- ``webhooks`` the ``webhook`` verifier: an operation's stored events reduced per channel
- ``view``     the decision-time reduction of webhook channels, in the deciding transaction
- ``locks``    advisory locks on evidence keys: intake shared, decision exclusive
- ``backwards`` readbacks that go backwards against the operation's earlier ones: inconsistent

Errors: none raised on purpose: a channel that cannot be read becomes a reading with its
status (``unavailable``, ``error``), never an exception.

May import: ``shared.db``, ``shared.runtime``, ``shared.core`` and libraries; never the
lifecycle (a reading does not change state) or the intake.
"""
