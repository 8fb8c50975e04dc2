"""Benchmark of the durable store (not run by pytest).

Measures, in one run and on one filesystem:

* the floor: a bare apsw single-row insert (autocommit) under the same pragmas as the stores
  (WAL, synchronous=FULL): one fsynced commit and nothing else;
* a durable Raft append through ``RunnerStore.persist``: one log entry with the hard state
  unchanged (a follower appending in its current term), and one that also changes the hard state
  (a new term with a vote);
* one applied transition through ``RunnerStore.save_transition`` (one ~1 KiB part upserted plus
  the applied index) on checkpoints of 1 KiB, 256 KiB and 4 MiB made of ~1 KiB parts.

Targets (issue 3): append p50 <= 1.5x the floor; transition on 4 MiB <= 2x the one on 1 KiB.

    .venv/bin/python bench/bench_store.py [--samples N] [--dir DIR] [--write docs/bench-store.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import apsw

from appliance.core.canonical import canonical_digest
from appliance.store.runner_store import RunnerStore
from appliance.store.sqlite import open_writable

PAYLOAD_BYTES = 256
PART_BYTES = 1024
CONTRACT = {"voters": {"n1": "127.0.0.1:4401"}, "limits": {}, "schedules": [], "remote": {}}


WARMUP_SAMPLES = 50
ROUNDS = 10


def _stats(durations_ms: list[float]) -> dict[str, float]:
    ordered = sorted(durations_ms)
    return {
        "p50": statistics.median(ordered),
        "p90": ordered[int(0.9 * (len(ordered) - 1))],
        "p99": ordered[int(0.99 * (len(ordered) - 1))],
    }


Step = Callable[[int], None]


def floor_step(root: Path) -> tuple[Step, Callable[[], None]]:
    conn = open_writable(root / "floor.sqlite3", create=True)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB NOT NULL)")
    payload = os.urandom(PAYLOAD_BYTES)

    def step(i: int) -> None:
        conn.execute("INSERT INTO t VALUES (?, ?)", (i + 1, payload))

    return step, conn.close


def _store(root: Path, name: str) -> RunnerStore:
    return RunnerStore.create_or_open(
        root / name, contract=CONTRACT, contract_digest=canonical_digest(CONTRACT)
    )


def append_step(root: Path, *, change_hard_state: bool) -> tuple[Step, Callable[[], None]]:
    store = _store(root, f"append-{change_hard_state}")
    payload = os.urandom(PAYLOAD_BYTES)
    store.persist(term=1, voted_for="n1")

    def step(i: int) -> None:
        term = i + 2 if change_hard_state else 1
        store.persist(term=term, voted_for="n1", entries=[(i + 1, term, payload)])

    return step, store.close


def transition_step(root: Path, state_bytes: int) -> tuple[Step, Callable[[], None]]:
    store = _store(root, f"transition-{state_bytes}")
    parts = max(1, state_bytes // PART_BYTES)
    blob = b'"' + b"x" * (PART_BYTES - 2) + b'"'
    for lo in range(0, parts, 256):  # build the state in a few large transitions
        chunk = {f"occurrence/{k}": blob for k in range(lo, min(parts, lo + 256))}
        store.save_transition(0, chunk)
    count, total = store.checkpoint_summary()
    if total < state_bytes * 0.99:
        raise RuntimeError(f"state is {total} bytes, wanted {state_bytes}")

    def step(i: int) -> None:
        changed = b'"' + str(i).encode().rjust(PART_BYTES - 2, b"y") + b'"'
        store.save_transition(
            i + 1, {f"occurrence/{i % count}": changed, "meta": b'{"applied":%d}' % (i + 1)}
        )

    return step, store.close


def run(root: Path, samples: int) -> dict[str, dict[str, float]]:
    """Every operation is measured in ``ROUNDS`` interleaved slices, so that a slow period of
    the shared disk hits all of them alike instead of skewing one ratio."""
    operations = {
        "floor: bare apsw insert": floor_step(root),
        "persist: 1 entry, hard state unchanged": append_step(root, change_hard_state=False),
        "persist: 1 entry + new term/vote": append_step(root, change_hard_state=True),
    }
    for label, size in (("1 KiB", 1024), ("256 KiB", 256 * 1024), ("4 MiB", 4 * 1024 * 1024)):
        operations[f"save_transition on {label} state"] = transition_step(root, size)
    durations: dict[str, list[float]] = {label: [] for label in operations}
    calls = dict.fromkeys(operations, 0)
    try:
        for label, (step, _close) in operations.items():
            for _ in range(WARMUP_SAMPLES):
                step(calls[label])
                calls[label] += 1
        per_round = max(1, samples // ROUNDS)
        for _ in range(ROUNDS):
            for label, (step, _close) in operations.items():
                for _ in range(per_round):
                    start = time.perf_counter_ns()
                    step(calls[label])
                    durations[label].append((time.perf_counter_ns() - start) / 1e6)
                    calls[label] += 1
    finally:
        for _step, close in operations.values():
            close()
    return {label: _stats(values) for label, values in durations.items()}


def report(results: dict[str, dict[str, float]], samples: int, where: Path) -> str:
    floor = results["floor: bare apsw insert"]["p50"]
    append = results["persist: 1 entry, hard state unchanged"]["p50"]
    append_hs = results["persist: 1 entry + new term/vote"]["p50"]
    small = results["save_transition on 1 KiB state"]["p50"]
    large = results["save_transition on 4 MiB state"]["p50"]
    lines = [
        f"apsw {apsw.apsw_version()}, SQLite {apsw.sqlite_lib_version()}, "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, {samples} samples each, "
        f"files in {where} (WAL, synchronous=FULL).",
        "",
        "| operation | p50 ms | p90 ms | p99 ms |",
        "|---|---:|---:|---:|",
    ]
    for label, stats in results.items():
        lines.append(f"| {label} | {stats['p50']:.3f} | {stats['p90']:.3f} | {stats['p99']:.3f} |")
    lines += [
        "",
        f"- durable append p50 / floor p50 = {append / floor:.2f} (target <= 1.5); "
        f"with a hard-state change {append_hs / floor:.2f}",
        f"- transition p50 on 4 MiB / on 1 KiB = {large / small:.2f} (target <= 2.0)",
    ]
    return "\n".join(lines)


DOC_HEADER = """# Store benchmark (bench/bench_store.py)

Produced by `.venv/bin/python bench/bench_store.py --samples {samples} --write docs/bench-store.md`
(timings with `time.perf_counter_ns` around each call; {warmup} untimed warm-up calls first;
the operations are measured in 10 interleaved rounds so a slow period of the disk hits all alike).

- *floor*: a bare apsw single-row insert in autocommit under the stores' pragmas (WAL,
  synchronous=FULL): one fsynced commit and nothing else.
- *persist*: `RunnerStore.persist` with one 256-byte log entry, hard state unchanged (a follower
  appending in its term) or changed (new term and vote), one transaction, durable on return.
- *save_transition*: one applied transition (one ~1 KiB part upserted, the "meta" part and the
  applied index rewritten) on a checkpoint of 1 KiB, 256 KiB or 4 MiB made of ~1 KiB parts.

Targets from issue 3: append p50 <= 1.5x the floor; transition on 4 MiB <= 2x the one on 1 KiB.
The machine is shared (2 CPUs, other test runs in parallel), so tails (p99) are noisy.

""".replace("{warmup}", str(WARMUP_SAMPLES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (a real disk)")
    parser.add_argument("--write", type=Path, default=None, help="also write the table here")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-store-", dir=args.dir))
    try:
        text = report(run(root, args.samples), args.samples, root.parent)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(text)
    if args.write is not None:
        args.write.write_text(DOC_HEADER.format(samples=args.samples) + text + "\n")


if __name__ == "__main__":
    main()
