"""The kinds a new voter must apply (appliance/runner/committed_kinds.py, issue 36): exactly the
kinds beyond the baseline that this voter's log committed, across restarts; every kind this
binary applies while the kinds before a snapshot or an older store are unknown."""

from __future__ import annotations

import json
from pathlib import Path

from appliance.capabilities import BASELINE_COMMAND_KINDS, command_kinds
from appliance.core import state as core
from appliance.core.limits import Limits
from appliance.runner.committed_kinds import FILE_NAME, CommittedKinds
from appliance.runner.machine import Machine, Refused, encode_command
from tests.store.helpers import open_runner

KNOWN = command_kinds()
BEYOND = KNOWN - BASELINE_COMMAND_KINDS


def test_a_fresh_store_records_exactly_the_kinds_its_log_committed(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    kinds = CommittedKinds(path, fresh_store=True, known=KNOWN)
    assert kinds.required() == frozenset() and kinds.complete
    kinds.note("Observe")  # a baseline kind: every binary applies it
    kinds.note("RunNow")
    kinds.note("RunNow")
    assert kinds.required() == {"RunNow"}
    assert path.stat().st_mode & 0o777 == 0o600
    assert json.loads(path.read_text()) == {"complete": True, "kinds": ["RunNow"]}
    again = CommittedKinds(path, fresh_store=False, known=KNOWN)  # a restart: the file decides
    assert again.required() == {"RunNow"} and again.complete


def test_an_unknown_prefix_requires_every_kind_this_binary_applies(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    older_store = CommittedKinds(tmp_path / "a" / FILE_NAME, fresh_store=False, known=KNOWN)
    assert older_store.required() == BEYOND and not older_store.complete
    # It stays unknown across a restart (the file says so).
    reopened = CommittedKinds(tmp_path / "a" / FILE_NAME, fresh_store=False, known=KNOWN)
    assert reopened.required() == BEYOND
    installed = CommittedKinds(tmp_path / FILE_NAME, fresh_store=True, known=KNOWN)
    installed.note("Pause")
    installed.prefix_unknown()  # a snapshot from the leader replaced the log
    assert installed.required() == BEYOND
    damaged = tmp_path / "b" / FILE_NAME
    damaged.parent.mkdir()
    damaged.write_text('{"complete": true, "kinds": "RunNow"}')
    assert CommittedKinds(damaged, fresh_store=True, known=KNOWN).required() == BEYOND


def test_the_machine_notes_every_committed_kind_refused_ones_included(tmp_path: Path) -> None:
    store = open_runner(tmp_path)
    try:
        machine = Machine(store, Limits())
        machine.apply(1, encode_command(core.AcquireOwnership("n1", 1, 1_000)))
        assert machine.committed_kinds.required() == frozenset()
        refused = machine.apply(2, encode_command(core.RunNow(7, 1_001, None)))  # no schedule 7
        assert isinstance(refused, Refused)
        machine.apply(3, encode_command(core.Pause(1_002)))
        assert machine.committed_kinds.required() == {"RunNow", "Pause"}
        assert machine.close()
    finally:
        store.close()
    reopened = open_runner(tmp_path)
    try:
        assert Machine(reopened, Limits()).committed_kinds.required() == {"RunNow", "Pause"}
    finally:
        reopened.close()


def test_the_files_limits_hold_at_the_boundary(tmp_path: Path) -> None:
    """At most COMMAND_KINDS_MAX kinds and FILE_BYTES_MAX bytes: exactly at each is read, one
    over counts as an unknown prefix (every kind of this binary)."""
    from appliance.capabilities import COMMAND_KINDS_MAX
    from appliance.runner.committed_kinds import FILE_BYTES_MAX

    def load(name: str, text: str) -> frozenset[str]:
        path = tmp_path / name / FILE_NAME
        path.parent.mkdir()
        path.write_text(text)
        return CommittedKinds(path, fresh_store=True, known=KNOWN).required()

    most = [f"K{i}" for i in range(COMMAND_KINDS_MAX)]
    assert load("at", json.dumps({"complete": True, "kinds": most})) == frozenset(most)
    over = json.dumps({"complete": True, "kinds": [*most, "K-over"]})
    assert load("over", over) == BEYOND
    body = json.dumps({"complete": True, "kinds": ["RunNow"]})
    padded = body + " " * (FILE_BYTES_MAX - len(body))
    assert load("bytes-at", padded) == {"RunNow"}
    assert load("bytes-over", padded + " ") == BEYOND
