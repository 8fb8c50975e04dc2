"""The replicated runner: one voter process (SPEC §6; docs/runner.md).

Modules, one job each: ``clock`` (injected wall time, ``--time-scale``), ``logs`` (one JSON
object per decision on stderr), ``machine`` (the replicated state machine: apply hook + store),
``binding`` (the claim's wire binding), ``ownership`` (the core's ownership, claim and admission
commands as the loop uses them), ``worker_client`` (exec/observe/cancel), ``admission`` (the
``POST /scheduler/v1/admit`` route), ``operator`` (stdin commands), ``loop`` (the one serialized
runner loop), ``process`` (start-up, shutdown) and ``quickstart``. The management listener
(``management/``) plugs into the same loop through ``Runner.operator``.
"""
