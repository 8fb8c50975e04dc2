"""The dedicated worker (SPEC §7): three scheduled routes, a durable admissions store, the engine.

Modules: ``wire`` (protocol v1 documents), ``admission`` (permit requests with fallback),
``service`` (launch path, cancel, observation), ``routes`` (Falcon resources), ``runtime``
(start-up and shutdown), ``crash`` (testing-only crash hook), ``child_pids`` (recorded engine
children). See docs/worker.md.
"""
