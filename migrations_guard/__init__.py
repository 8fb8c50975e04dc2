"""migrations_guard: decide whether this binary may open a store, before anything touches it.

``inspect_store(path)`` reads and verifies a store without changing a byte (no -wal/-shm files
created, no recovery); ``decide(facts, expected_digest, binary_reader_version)`` is a pure
function that accepts it or refuses it with a message naming what differs and what the operator
can do. There is no automatic migration.
"""

from migrations_guard.decide import Decision, decide, differing_keys
from migrations_guard.facts import StoreFacts
from migrations_guard.inspect import inspect_store, locate_store

__all__ = ["Decision", "StoreFacts", "decide", "differing_keys", "inspect_store", "locate_store"]
