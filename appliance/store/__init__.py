"""Durable stores (SQLite through apsw): the runner store and the worker store.

Both stores are one SQLite file each, opened only after ``migrations_guard`` has inspected the file
read-only and accepted it. See docs/store.md for the layout and the durability assumptions.

Import the stores from their modules (``appliance.store.runner_store``,
``appliance.store.worker_store``); this package module stays free of imports so that
``migrations_guard`` can use the shared layout modules without an import cycle.
"""
