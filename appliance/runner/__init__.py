"""The voter process and the owner's driver (SPEC §6; docs/runner.md, docs/architecture.md).

``loop`` (the owner's thin driver: one queue, one thread), ``machine`` (the replicated state
machine: apply hook + store), ``checkpoint_writer``, ``logs`` (one JSON object per decision on
stderr), ``worker_client`` (exec/observe/cancel over HTTP), ``admission`` (the
``POST /scheduler/v1/admit`` route), ``membership_commands``, ``contract_startup``,
``drain_notice`` and ``process`` (start-up, shutdown). The decisions themselves are the owner
core's (``appliance.owner``); operator commands are ``appliance.commands``; the management
listener (``appliance.management``) plugs into the same loop through ``Runner.operator``.
"""
