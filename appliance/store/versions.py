"""Store kinds, schema versions and reader versions (named once, used by store and guard).

*Schema version* describes the table layout; a binary opens only the schema versions it knows
(no automatic migration). *Reader versions* describe what a binary can understand in the stored
data: every store records the minimum reader version needed to read it, and a binary whose
``BINARY_READER_VERSION`` is lower refuses the store. The runner raises its minimum to
``READER_VERSION_CANCELLING`` while the checkpoint holds an unresolved ``Cancelling`` occurrence,
because older binaries cannot read the cancellation states (seeds/001, "Operator commands and
states"); a rollback to such a binary is then refused instead of misreading the checkpoint.

``READER_VERSION_COMPACTED`` (3): the log has been compacted at least once (its first entry is
above 1, entries below it live only in the snapshot, described by the ``snapshot`` meta row). A
binary of reader version 2 or less would read such a log as complete — it would replay from a
checkpoint it believes the log still covers, and a leader would look for entries that are gone —
so the first compaction (or snapshot install) raises the store's minimum to 3, in the same
commit, and it never goes back down (docs/store.md, "Compaction and the reader version").

``READER_VERSION_CHARGING`` (6): the checkpoint names charging rules 2 (the ``charging`` part,
appliance/core/charging.py). A binary that charges by rules 1 would decide growth commands
differently from the same log, so the minimum is 6 for good once the switch is committed.
"""

from __future__ import annotations

KIND_RUNNER = "runner"
KIND_WORKER = "worker"

RUNNER_FILE_NAME = "runner.sqlite3"
WORKER_FILE_NAME = "worker.sqlite3"
LOCK_FILE_NAME = "LOCK"

STORE_FILE_NAMES = {KIND_RUNNER: RUNNER_FILE_NAME, KIND_WORKER: WORKER_FILE_NAME}

# Table layouts this binary knows, per kind (SPEC §4: runner checkpoint schema is 2).
RUNNER_SCHEMA_VERSION = 2
WORKER_SCHEMA_VERSION = 1
KNOWN_SCHEMA_VERSIONS = {
    KIND_RUNNER: (RUNNER_SCHEMA_VERSION,),
    KIND_WORKER: (WORKER_SCHEMA_VERSION,),
}

# Reader versions. 1: the baseline states (no cancellation variants). 2: also Cancelling /
# Cancelled and the acknowledgement of an unresolved Cancelling. 3: also a compacted log (its
# first entries live only in the snapshot). 4: also the parts and fields of the operator commands
# beyond the seeds (pause, run_now request ids, policy.jitter_seconds, an
# update's kept code and history; appliance/core/features.py says when each is present). 6: also
# the checkpoint budget's charging rules 2 (the ``charging`` part).
READER_VERSION_BASELINE = 1
READER_VERSION_CANCELLING = 2
READER_VERSION_COMPACTED = 3
READER_VERSION_COMMANDS = 4
# 5: also the contract amendments part (``contract/amended``, appliance/core/amendments.py). An
# older binary refuses an unknown checkpoint part, so the runner raises its minimum to 5 from the
# first committed amendment on (amendments are never removed).
READER_VERSION_AMENDED = 5
READER_VERSION_CHARGING = 6
# 7: also the fleet (issue 33): the fleet's amendments (``fleet`` in ``contract/amended``, a
# worker list in force) and definitions with ``placement``; a binary before it would read the
# remote as one worker and drop the placement rules.
READER_VERSION_FLEET = 7
BINARY_READER_VERSION = READER_VERSION_FLEET
CURRENT_SCHEMA_VERSION = {KIND_RUNNER: RUNNER_SCHEMA_VERSION, KIND_WORKER: WORKER_SCHEMA_VERSION}
