"""The demo's scenarios: one engine that plays an agent against a running Provely and sandbox.

The engine knows nothing of how the system runs. A *system* (``provely demo`` starts the
embedded one; the end-to-end tests start separate processes on PostgreSQL and Redis) gives it
the API's URL, a way to run admin commands, and Stripe sandboxes. Everything else goes over
HTTP, the way an agent and a provider would talk to Provely:

1. the operator creates a workspace (``provely workspace create``), registers the workspace's
   webhook endpoint at the sandbox and stores the connection (``provely connection set``);
2. the agent creates an operation, performs the action at the sandbox with the operation id as
   ``Idempotency-Key``, reports what happened, and reads the verdict;
3. the sandbox delivers signed events to the ingress; Provely observes and decides.

Each scenario states the verdict it must reach and why. Settlement never waits on a sleep: the
sandbox's clock is advanced (``/_sandbox/advance``) once Provely has seen the refund pending.
Scenarios that need a deadline within seconds run on a short-timing copy of
``stripe.refund.succeeded``, signed into a demo skill with a key generated for the run
(``refund_contract.write_short_timing_skill``), never by allowing unsigned skills.

Modules, each importing only those above it:

- ``system``           what the engine needs from a running system (``System``, ``Sandbox``)
- ``refund_contract``  the refund contract's versions and its short-timing copy in a demo skill
- ``workspace``        a workspace set up as its operator would (``open_workspace``)
- ``agent``            the agent: HTTP to Provely and to the sandbox
- ``scenario``         what a scenario must reach, how it plays, and what came out (``Outcome``)
- ``judging``          an outcome judged: the verdict as expected, the receipt verified offline
- ``refunds``          the refund traps and how the agent plays each
- ``entitlement``      the scenario whose app must take the seats back after a refund
- ``catalog``          every scenario by name (``SCENARIOS``)
- ``running``          running scenarios concurrently (``run_scenarios``)

May import: ``shared`` and libraries; nothing else of ``services`` but the sandbox's runner
(for an app of the user's own) and ``examples/``. The demo command imports this package; this
package knows nothing of the command.
"""
