"""What the in-memory log tail of ``RunnerStore`` saves on a leader's hot path (issue 4).

For each read a leader makes per append it sends — the previous entry's term (``term_at``) and
the newest entries (``entries``) — time it on a store holding ``--entries`` 100-byte entries,
once served by the in-memory tail (the default) and once with no tail (``log_tail_entries_max=0``:
a SQLite read plus a checksum per row, as before the tail existed). Also times one durable
``persist`` of one entry either way (the tail's upkeep must not show there). Results:
docs/bench-raft.md.

    .venv/bin/python bench/bench_runner_log_tail.py [--entries 5000] [--reads 20000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from appliance.core.canonical import canonical_digest
from appliance.store.runner_store import RunnerStore

CONTRACT = {"voters": {"n1": "127.0.0.1:1"}, "bench": True}
PAYLOAD = b"p" * 100


def open_store(data_dir: Path, tail_entries_max: int) -> RunnerStore:
    return RunnerStore.create_or_open(
        data_dir,
        contract=CONTRACT,
        contract_digest=canonical_digest(CONTRACT),
        log_tail_entries_max=tail_entries_max,
    )


def per_call_us(call, count: int) -> float:  # type: ignore[no-untyped-def]
    """Median over 5 batches of ``count // 5`` calls, in microseconds per call."""
    batch = max(1, count // 5)
    samples = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(batch):
            call()
        samples.append((time.perf_counter() - started) / batch * 1e6)
    return statistics.median(samples)


def measure(tail_entries_max: int, entries: int, reads: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp, open_store(Path(tmp), tail_entries_max) as store:
        batch = 500
        for lo in range(1, entries + 1, batch):
            hi = min(entries, lo + batch - 1)
            store.persist(
                term=1, voted_for=None, entries=[(i, 1, PAYLOAD) for i in range(lo, hi + 1)]
            )
        last = store.last_index()
        result = {
            "term_at(last) us": per_call_us(lambda: store.term_at(last), reads),
            "entries(last-3..last) us": per_call_us(
                lambda: store.entries(last - 3, last + 1, 1 << 20), reads
            ),
        }
        persists = []
        for _ in range(200):
            index = store.last_index() + 1
            started = time.perf_counter()
            store.persist(term=1, voted_for=None, entries=[(index, 1, PAYLOAD)])
            persists.append((time.perf_counter() - started) * 1e3)
        result["persist 1 entry ms (median)"] = statistics.median(persists)
        return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=5000)
    parser.add_argument("--reads", type=int, default=20000)
    args = parser.parse_args()
    rows = {
        "no tail (SQLite + checksum)": measure(0, args.entries, args.reads),
        "in-memory tail (default)": measure(4096, args.entries, args.reads),
    }
    keys = list(next(iter(rows.values())))
    print("| store | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(f"{row[k]:.3f}" for k in keys) + " |")


if __name__ == "__main__":
    main()
