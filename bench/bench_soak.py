"""Soak: bytes on disk over a long run, with the default compaction and retention thresholds
(issue 19, "Must show").

Real processes on loopback for each backend in turn: three ``appliance runner`` voters
(``--time-scale``) and one ``appliance worker``; for etcd the three runners share one prefix of
a real 3-member etcd cluster started here. ``--schedules`` schedules ``* * * * *`` (Concurrent,
``1 + 1``) run until the owners logged ``--occurrences`` accepted dispatches (or
``--max-seconds``). Every ``--interval-s`` the bench records, for each store, the bytes of the
database, its ``-wal`` and its ``-shm`` (each voter's runner store, the worker store; for etcd
each member's ``member/snap/db`` and ``member/wal``) and the accepted count so far.

The rule: every store's total after the run is at most 1.1 x its total at 30 % of the run (by
accepted occurrences), once retention is full (``limits.records`` 4,096 records retained, the
Raft log compacted at ``snapshot_entries`` 10,000 keeping 5,000). The one-year figure at 64 and
1,024 every-minute schedules is the final size plus the growth per occurrence measured over the
last third of the samples (taken as 0 when the size fell), times the occurrences still to come
in a year: an upper bound, since a plateau's residual page allocations are counted as growth.
``after / at retention full`` compares with the first sample at which the worker's W rose above
0 (``limits.records`` reached): in a slice shorter than about 3 x that point, the 30 % point comes
before retention is full and the rule as stated measures the filling, not the steady state.

Time scale: the owner's observation deadline is ``timeout_seconds`` + 30 wall seconds after a
send, i.e. (timeout + 30) / scale real seconds, while the engine enforces ``timeout_seconds`` in
real seconds. The grant's ``timeout_seconds`` is 1 here, so the deadline stays longer than the
engine's timeout as long as the scale is below 31 (refused otherwise).

etcd's own files: its WAL is written in 64 MB preallocated segments and purged (down to
``--max-wals`` 5) only after etcd snapshots, every ``--snapshot-count`` applied entries. etcd 3.4's
default is 100,000 entries (etcd 3.6 lowered it to 10,000, the figure issue 19 cites), i.e. up to
5 segments before the first purge; the bench runs the members with ``--etcd-snapshot-count``
(10,000 unless told; 0 keeps the binary's default), ``--etcd-max-wals`` if given, and says so in
its table.

Run (the full issue figure, roughly 30 minutes per backend on this machine):
``nice .venv/bin/python bench/bench_soak.py --occurrences 100000``; a bounded slice:
``nice .venv/bin/python bench/bench_soak.py --occurrences 12000 --max-seconds 270``.
Not run by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.etcd.cluster import EtcdCluster
from tests.etcd.members import fresh_prefix
from tests.runner.cluster import Cluster

TIMEOUT_SECONDS = 1  # the grant's engine timeout (real seconds)
OBSERVE_GRACE_S = 30  # appliance/owner/attempts.py (wall seconds)
MINUTES_PER_YEAR = 525_600
RULE_FACTOR = 1.1
AT_FRACTION = 0.3


def definition(i: int) -> dict[str, Any]:
    return {
        "name": f"soak-{i}",
        "code": "1 + 1",
        "cron": "* * * * *",
        "timezone": "UTC",
        "policy": {
            "missed": {"CatchUp": {"cap": 1}},
            "overlap": "Concurrent",
            "retry": {"max_retries": 0, "delay_seconds": 0},
        },
    }


def sqlite_files(path: Path) -> dict[str, int]:
    return {
        suffix or "db": (path.with_name(path.name + suffix).stat().st_size
                         if path.with_name(path.name + suffix).exists() else 0)
        for suffix in ("", "-wal", "-shm")
    }  # fmt: skip


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def etcd_files(member: Path) -> dict[str, int]:
    db = member / "member" / "snap" / "db"
    return {
        "db": db.stat().st_size if db.exists() else 0,
        "wal": dir_bytes(member / "member" / "wal"),
        "snap": dir_bytes(member / "member" / "snap") - (db.stat().st_size if db.exists() else 0),
    }


@dataclass
class Sample:
    elapsed_s: float
    accepted: int
    stores: dict[str, dict[str, int]]
    load: float
    retained_through: int  # the worker's recorded W (0: nothing pruned yet)


@dataclass
class Counter:
    """Counts ``dispatch_accepted`` lines in the voters' decision logs, reading only new bytes."""

    offsets: dict[Path, int] = field(default_factory=dict)
    count: int = 0
    created: int = 0  # due slots the owners' selections created
    dropped: dict[str, int] = field(default_factory=dict)  # and dropped, by reason

    def update(self, logs: list[Path]) -> int:
        for path in logs:
            if not path.exists():
                continue
            with open(path, "rb") as f:
                f.seek(self.offsets.get(path, 0))
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1  # count whole lines only
            self.count += chunk[:end].count(b'"dispatch_accepted"')
            for line in chunk[:end].splitlines():
                if b'"selection"' in line:
                    self._selection(line)
            self.offsets[path] = self.offsets.get(path, 0) + end
        return self.count

    def _selection(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return
        if event.get("event") != "selection":
            return
        self.created += len(event.get("created") or ())
        for _sid, reason, n in event.get("dropped") or ():
            self.dropped[reason] = self.dropped.get(reason, 0) + int(n)


def read_one(path: Path, sql: str) -> Any:
    if not path.exists():
        return None
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        conn.set_busy_timeout(2_000)
        rows = conn.execute(sql).fetchall()
        return rows[0] if rows else None
    except apsw.Error:
        return None
    finally:
        conn.close()


def run_backend(
    root: Path, replication: dict[str, Any] | None, etcd_root: Path | None, args: argparse.Namespace
) -> dict[str, Any]:
    cluster = Cluster(
        root,
        3,
        time_scale=args.time_scale,
        worker=True,
        timeout_seconds=TIMEOUT_SECONDS,
        raft=None,  # the product's defaults: timers and compaction thresholds
        replication=replication,
    )
    for voter in cluster.voters.values():  # more schedules than the default limit of 64
        doc = json.loads(voter.config.read_text())
        doc["limits"] = {"schedules": max(64, args.schedules)}
        voter.config.write_text(json.dumps(doc))
    stores: dict[str, Any] = {f"{v} runner": root / v / "runner.sqlite3" for v in cluster.voters}
    stores["worker"] = root / "worker-data" / "worker.sqlite3"
    members = [] if etcd_root is None else sorted(p for p in etcd_root.iterdir() if p.is_dir())
    logs = [v.log for v in cluster.voters.values()]
    counter = Counter()
    samples: list[Sample] = []
    started = time.monotonic()

    def sample() -> Sample:
        figures = {name: sqlite_files(path) for name, path in stores.items()}
        for member in members:
            figures[f"etcd {member.name}"] = etcd_files(member)
        floor = read_one(stores["worker"], "SELECT value FROM meta WHERE key = 'retained_through'")
        return Sample(
            round(time.monotonic() - started, 1),
            counter.update(logs),
            figures,
            os.getloadavg()[0],
            0 if floor is None else int(floor[0]),
        )

    try:
        cluster.start()
        owner = cluster.owner()
        for i in range(args.schedules):
            reply = owner.command({"action": "create", "definition": definition(i)})
            if not reply.get("ok"):
                raise SystemExit(f"create failed: {reply}")
        started = time.monotonic()
        samples.append(sample())
        while True:
            time.sleep(args.interval_s)
            samples.append(sample())
            print(
                f"  {samples[-1].elapsed_s:7.1f} s  accepted {samples[-1].accepted:7d}  "
                f"load {samples[-1].load:.1f}",
                flush=True,
            )
            if samples[-1].accepted >= args.occurrences:
                break
            if args.max_seconds and samples[-1].elapsed_s >= args.max_seconds:
                break
            if not all(v.alive for v in cluster.voters.values()):
                raise SystemExit("a voter died:\n" + cluster.dump_logs())
        worker_db = stores["worker"]
        floor = read_one(worker_db, "SELECT value FROM meta WHERE key = 'retained_through'")
        kept = read_one(worker_db, "SELECT count(*) FROM invocation")
        logs_kept = {
            name: read_one(path, "SELECT count(*), min(idx), max(idx) FROM log")
            for name, path in stores.items()
            if name != "worker"
        }
        return {
            "samples": samples,
            "worker_retained_through": None if floor is None else int(floor[0]),
            "worker_invocations": None if kept is None else int(kept[0]),
            "log_rows": logs_kept,
            "created": counter.created,
            "dropped": counter.dropped,
        }
    finally:
        cluster.stop()


def total(figures: dict[str, int]) -> int:
    return sum(figures.values())


def report(name: str, result: dict[str, Any], args: argparse.Namespace) -> list[str]:
    samples: list[Sample] = result["samples"]
    last = samples[-1]
    target = AT_FRACTION * last.accepted
    at = next(s for s in samples if s.accepted >= target)
    rate = last.accepted / max(1e-9, last.elapsed_s)
    full = next((s for s in samples if s.retained_through > 0), None)
    lines = [
        f"### {name}",
        "",
        f"{last.accepted:,} occurrences accepted in {last.elapsed_s:.0f} s ({rate:.1f}/s), "
        f"{args.schedules} x `* * * * *` at time scale {args.time_scale:g}, grant "
        f"`timeout_seconds` {TIMEOUT_SECONDS} (observation deadline "
        f"{(TIMEOUT_SECONDS + OBSERVE_GRACE_S) / args.time_scale:.2f} s real); the 30 % point "
        f"is the sample at {at.elapsed_s:.0f} s ({at.accepted:,} accepted); retention was "
        + (
            "never full (no record retired yet)"
            if full is None
            else f"first full (the worker's W above 0) at {full.elapsed_s:.0f} s "
            f"({full.accepted:,} accepted)"
        )
        + f". Worker at the end: W = "
        f"{result['worker_retained_through']}, {result['worker_invocations']} invocation "
        f"records kept. Raft log rows (count, first, last): "
        + ", ".join(f"{k.split()[0]} {v}" for k, v in result["log_rows"].items())
        + f". Due slots the owners selected: {result['created']:,} created, dropped by reason "
        + (", ".join(f"{r} {n:,}" for r, n in sorted(result["dropped"].items())) or "none")
        + ".",
        "",
        "| store | files at 30 % (MB) | total at 30 % | files after (MB) | total after "
        "| after / 30 % | rule ≤ 1.1 | after / at retention full | 1 year, 64 schedules "
        "(upper bound) | 1 year, 1,024 schedules (upper bound) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for store in last.stores:
        before, after = at.stores[store], last.stores[store]
        ratio = total(after) / max(1, total(before))
        # Growth per occurrence over the last third of the samples (steady state, whatever the
        # 30 % point was), never negative: the one-year figure is an upper bound.
        tail = samples[len(samples) - 1 - len(samples) // 3]
        grown = max(0, total(after) - total(tail.stores[store]))
        per_occurrence = grown / max(1, last.accepted - tail.accepted)
        years = [
            total(after) + per_occurrence * max(0, s * MINUTES_PER_YEAR - last.accepted)
            for s in (64, 1024)
        ]
        vs_full = "-" if full is None else f"{total(after) / max(1, total(full.stores[store])):.3f}"
        lines.append(
            f"| {store} | {_files(before)} | {_mb(total(before))} | {_files(after)} | "
            f"{_mb(total(after))} | {ratio:.3f} | {'met' if ratio <= RULE_FACTOR else 'NOT met'} "
            f"| {vs_full} | {_mb(years[0])} | {_mb(years[1])} |"
        )
    lines += [
        "",
        "Per interval (accepted occurrences; total MB of each store):",
        "",
        "| s | accepted | worker W | load | " + " | ".join(last.stores) + " |",
        "|---|---|---|---|" + "---|" * len(last.stores),
    ]
    for s in samples:
        lines.append(
            f"| {s.elapsed_s:.0f} | {s.accepted:,} | {s.retained_through:,} | {s.load:.1f} | "
            + " | ".join(f"{total(s.stores[k]) / 1e6:.2f}" for k in last.stores)
            + " |"
        )
    return lines


def _mb(value: float) -> str:
    if value >= 1e9:
        return f"{value / 1e9:.2f} GB"
    return f"{value / 1e6:.2f} MB"


def _files(figures: dict[str, int]) -> str:
    return " / ".join(f"{k} {v / 1e6:.2f}" for k, v in figures.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("raft", "etcd", "both"), default="both")
    parser.add_argument("--occurrences", type=int, default=100_000)
    parser.add_argument("--schedules", type=int, default=210)
    parser.add_argument("--time-scale", type=float, default=20.0)
    parser.add_argument("--interval-s", type=float, default=15.0)
    parser.add_argument("--max-seconds", type=float, default=0.0, help="0: no limit")
    parser.add_argument("--write", type=Path, default=None, help="also write the tables here")
    parser.add_argument(
        "--etcd-snapshot-count",
        type=int,
        default=10_000,
        help="etcd's --snapshot-count (0: the binary's own default, 100,000 in etcd 3.4)",
    )
    parser.add_argument(
        "--etcd-max-wals",
        type=int,
        default=0,
        help="etcd's --max-wals, the WAL segments it keeps (0: the binary's default, 5)",
    )
    args = parser.parse_args()
    deadline_real_s = (TIMEOUT_SECONDS + OBSERVE_GRACE_S) / args.time_scale
    if deadline_real_s <= TIMEOUT_SECONDS:
        raise SystemExit(
            f"--time-scale {args.time_scale:g}: the observation deadline ({deadline_real_s:.2f} s "
            f"real) would not be longer than the engine's timeout ({TIMEOUT_SECONDS} s)"
        )
    lines = [
        f"3 voters + 1 worker on loopback, {os.cpu_count()} cores, load average at start "
        f"{os.getloadavg()[0]:.1f}; default thresholds (snapshot_entries 10,000, "
        "trailing_entries 5,000, limits.records 4,096).",
        "",
    ]
    raw: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("SOAK_DIR")) as tmp:
        base = Path(tmp)
        if args.backend in ("raft", "both"):
            (base / "raft").mkdir()
            print("built-in Raft:", flush=True)
            result = run_backend(base / "raft", None, None, args)
            raw["raft"] = result
            lines += [*report("Built-in Raft", result, args), ""]
        if args.backend in ("etcd", "both"):
            (base / "etcd").mkdir()
            (base / "etcd-data").mkdir()
            flags = tuple(
                f"--{name}={value}"
                for name, value in (
                    ("snapshot-count", args.etcd_snapshot_count),
                    ("max-wals", args.etcd_max_wals),
                )
                if value
            )
            etcd = EtcdCluster(base / "etcd-data", 3, extra_args=flags)
            etcd.start()
            try:
                replication = {
                    "kind": "etcd",
                    "endpoints": etcd.endpoints,
                    "prefix": fresh_prefix(),
                }
                print("etcd:", flush=True)
                result = run_backend(base / "etcd", replication, base / "etcd-data", args)
                raw["etcd"] = result
            finally:
                etcd.stop()
            shown = " ".join(flags) or "etcd's defaults"
            lines += [*report(f"etcd (3 members, etcd 3.4, {shown})", result, args), ""]
    text = "\n".join(lines)
    print(text)
    if args.write is not None:
        args.write.write_text(text + "\n")
        args.write.with_suffix(".json").write_text(json.dumps(raw, default=lambda o: o.__dict__))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
