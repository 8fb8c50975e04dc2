"""SIGKILL in the middle of a burst of transactions leaves a store that opens and holds a prefix
of the committed writes: never half a transaction, never less than what was acknowledged.

The child writes, per step i, one ``persist`` (hard state term=i plus three log entries
3i-2..3i) and one ``save_transition`` (applied index i: "meta" rewritten, "occ/i" added,
"occ/i-1" deleted), and prints i only after both returned. Each round kills it with SIGKILL
after a different number of acknowledged steps, then checks every invariant, and the next round
continues from what survived.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from migrations_guard import inspect_store
from tests.store.helpers import fingerprint, open_runner

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys
from pathlib import Path
from tests.store.helpers import open_runner

def payload(j):
    return json.dumps({"entry": j, "pad": "p" * (j % 97)}).encode()

store = open_runner(Path(sys.argv[1]))
k = store.last_index() // 3
if store.applied_index() < k:
    store.save_transition(k, {"meta": json.dumps({"applied": k}).encode(), f"occ/{k}": b"{}"},
                          [f"occ/{k - 1}"] if k > 1 else [])
print("ready", k, flush=True)
i = k
while True:
    i += 1
    store.persist(term=i, voted_for=f"n{i % 3}",
                  entries=[(j, i, payload(j)) for j in range(3 * i - 2, 3 * i + 1)])
    store.save_transition(i, {"meta": json.dumps({"applied": i}).encode(), f"occ/{i}": b"{}"},
                          [f"occ/{i - 1}"] if i > 1 else [])
    print(i, flush=True)
"""


def payload(j: int) -> bytes:
    return json.dumps({"entry": j, "pad": "p" * (j % 97)}).encode()


def run_and_kill(data_dir: Path, acknowledgements: int) -> int:
    """Start the writer, SIGKILL it after ``acknowledgements`` steps; the last step it acked."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(data_dir)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert child.stdout is not None
    try:
        ready = child.stdout.readline().split()
        assert ready[0] == "ready", ready
        last = int(ready[1])
        for _ in range(acknowledgements):
            last = int(child.stdout.readline())
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    return last


def check_prefix(data_dir: Path, acknowledged: int) -> int:
    before = fingerprint(data_dir)
    facts = inspect_store(data_dir)
    assert fingerprint(data_dir) == before
    assert facts.problems == ()
    assert facts.wal_present, "a killed writer leaves its -wal; inspection must not recover it"
    with open_runner(data_dir) as store:
        last = store.last_index()
        assert last % 3 == 0, "a persist is all three entries or none"
        steps = last // 3
        assert steps >= acknowledged, "an acknowledged persist must survive the crash"
        assert store.hard_state() == (steps, f"n{steps % 3}")
        assert store.entries(1, last + 1) == [
            (j, (j + 2) // 3, payload(j)) for j in range(1, last + 1)
        ]
        applied, parts = store.load_checkpoint()
        assert applied >= acknowledged
        assert applied in (steps - 1, steps), "a transition follows its persist"
        expected = {"meta": json.dumps({"applied": applied}).encode()}
        if applied:
            expected[f"occ/{applied}"] = b"{}"
        assert parts == expected, "a transition is all its upserts and deletes or none"
    return steps


def test_sigkill_mid_burst_leaves_a_committed_prefix(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    for acknowledgements in (25, 7, 60):
        acknowledged = run_and_kill(data_dir, acknowledgements)
        check_prefix(data_dir, acknowledged)
