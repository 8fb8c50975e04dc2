"""The replicated runner: one voter process (SPEC §6; docs/runner.md, docs/architecture.md).

Modules, one job each. The owner core, sans-I/O: ``owner`` (the contract, leadership, ownership,
pulse and claims), ``owner_serial`` (continuations keyed by token, timers), ``owner_attempts``
(dispatch, observation, Unknown, cancellation), ``owner_requests`` (admission and operator
commands), ``owner_events`` (its events and effects), ``ownership`` (pure helpers over the core's
ownership, claim and admission commands), ``command_table`` (the operator commands),
``applied`` and ``worker_answers`` (the results it reads). Around it: ``loop`` (the owner's thin
driver: one queue, one thread), ``machine`` (the replicated state machine: apply hook + store),
``logs`` (one JSON object per decision on stderr), ``binding`` (the claim's wire binding),
``worker_client`` (exec/observe/cancel), ``admission`` (the ``POST /scheduler/v1/admit`` route),
``operator`` (stdin commands), ``process`` (start-up, shutdown) and ``quickstart``. The
management listener (``management/``) plugs into the same loop through ``Runner.operator``.
"""
