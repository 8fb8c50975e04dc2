"""Waiting is not working (issue 32 item 7): 64 executions each awaiting a 1-second response.

Run from the repository root::

    .venv/bin/python bench/bench_waiting.py --baseline /tmp/bench-main

where ``/tmp/bench-main`` is a checkout of the engine without the change, made with
``mkdir -p /tmp/bench-main && git archive main | tar -x -C /tmp/bench-main``. Each variant
starts a real worker process (temp data_dir, loopback port, a local admission peer that grants
at once, ``max_concurrent`` = the count), sends all execs at once and watches them to the end:

- ``fetch``: this tree, an ``egress`` section (a policy that allows loopback), every script
  awaits ``fetch()`` of a loopback server that answers after 1 s;
- ``timer``: this tree, every script awaits a 1 s timer (the same wait without the network);
- ``baseline timer``: the baseline tree (it has no ``fetch``), the same timer script.

Reported per variant: how long after the first exec was sent ("the due time") the last one
finished (``finished_at`` as the worker recorded it) and the median; the peak, while the run
lasts, of the summed RSS of the worker and its engine children (and the summed PSS, which counts
the pages the children share — mini-racer's library — once); children at the peak. Targets: all
finished within 3 s of the due time, worker + children under 1 GiB RSS. Not run by pytest;
results go to docs/benchmarks.md by hand.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.slow_upstream import SlowServer  # noqa: E402
from tests.ports import free_ports  # noqa: E402
from tests.worker.peers import (  # noqa: E402
    ADMISSION_TOKEN,
    NAMESPACE,
    WORKER_ID,
    WORKER_TOKEN,
    AdmissionPeer,
    exec_body,
    execution_id,
)

ALLOW_LOOPBACK = """package appliance.egress
import rego.v1

default allow := false

allow if input.url_parsed.host == "127.0.0.1"
"""
SAMPLE_INTERVAL_S = 0.05
READY_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 120.0
POLL_INTERVAL_S = 1.0


def _status_kib(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int, *, reaped_children: bool = False) -> float:
    """User + system CPU of pid (and of its children it already reaped)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if reaped_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / TICKS_PER_S


def cpu_of_tree(pid: int) -> float:
    """CPU seconds of a process, its live children and the children it reaped."""
    return _cpu_s(pid, reaped_children=True) + sum(_cpu_s(child) for child in _children_of(pid))


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


class MemorySampler:
    """Peak of the summed RSS (and PSS) of a process and its children, sampled."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self.peak_rss_kib = 0
        self.peak_pss_kib = 0
        self.children_at_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            pids = [self._pid, *_children_of(self._pid)]
            rss = sum(_status_kib(pid, "VmRSS") for pid in pids)
            if rss > self.peak_rss_kib:
                self.peak_rss_kib = rss
                self.peak_pss_kib = sum(_pss_kib(pid) for pid in pids)
                self.children_at_peak = len(pids) - 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class Worker:
    def __init__(
        self, tmp: Path, source: Path, admission_url: str, config_extra: dict[str, Any]
    ) -> None:
        self.port = free_ports(1)[0]
        config = {
            "namespace": NAMESPACE,
            "worker_id": WORKER_ID,
            "data_dir": str(tmp / "data"),
            "bearer_env": "TEST_WORKER_TOKEN",
            "admission_bearer_env": "TEST_ADMISSION_TOKEN",
            "admission_urls": [admission_url],
            "listen_addr": f"127.0.0.1:{self.port}",
            **config_extra,
        }
        path = tmp / "worker.json"
        path.write_text(json.dumps(config))
        env = {key: os.environ[key] for key in ("PATH", "HOME") if key in os.environ}
        env.update(
            PYTHONPATH=str(source),  # the tree under test, before the editable install
            TEST_WORKER_TOKEN=WORKER_TOKEN,
            TEST_ADMISSION_TOKEN=ADMISSION_TOKEN,
        )
        self._log = (tmp / "worker.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "appliance", "worker", "--config", str(path)],
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            cwd=str(source),
        )
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()
        if not ready:
            raise SystemExit(f"the worker did not start; see {tmp / 'worker.log'}")

    def call(self, method: str, path: str, document: Any = None) -> dict[str, Any]:
        data = None if document is None else json.dumps(document).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {WORKER_TOKEN}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        self._log.close()


def run_variant(
    label: str,
    source: Path,
    code: str,
    config_extra: dict[str, Any],
    count: int,
    admission: AdmissionPeer,
) -> dict[str, Any]:
    load_at_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        worker = Worker(Path(tmp), source, admission.url, config_extra)
        sampler = MemorySampler(worker.proc.pid)
        cpu_before = cpu_of_tree(worker.proc.pid)
        worker_cpu_before = _cpu_s(worker.proc.pid)
        try:
            due_wall = datetime.now().astimezone()
            started = time.monotonic()
            accepted_s: list[float] = []

            def exec_one(n: int) -> dict[str, Any]:
                body = exec_body(code, occurrence_id=n, timeout_seconds=60)
                try:
                    answer = worker.call("POST", "/api/scheduled/v1/exec", body)
                except urllib.error.HTTPError as exc:
                    return {"state": f"http {exc.code}: {exc.read()[:200]!r}"}
                accepted_s.append(time.monotonic() - started)
                return answer

            with concurrent.futures.ThreadPoolExecutor(count) as pool:
                answers = list(pool.map(exec_one, range(1, count + 1)))
            accepted = sum(1 for a in answers if a.get("state") == "accepted")
            refused = [a["state"] for a in answers if a.get("state") != "accepted"]
            documents = {}
            pending = {
                execution_id(n)
                for n, answer in zip(range(1, count + 1), answers, strict=True)
                if answer.get("state") == "accepted"
            }
            while pending and time.monotonic() - started < RUN_TIMEOUT_S:
                # Slowly: the finish times come from the documents (finished_at), and polling
                # 64 executions fast would load the worker the bench is measuring.
                time.sleep(POLL_INTERVAL_S)
                for eid in sorted(pending):
                    document = worker.call("GET", f"/api/scheduled/v1/executions/{eid}")
                    if document["status"] not in ("running", "reserved"):
                        documents[eid] = document
                        pending.discard(eid)
            cpu_used = cpu_of_tree(worker.proc.pid) - cpu_before
            worker_cpu = _cpu_s(worker.proc.pid) - worker_cpu_before
        finally:
            sampler.stop()
            worker.stop()
    finish_s = sorted(
        (datetime.fromisoformat(d["finished_at"]) - due_wall).total_seconds()
        for d in documents.values()
        if d.get("finished_at")
    )
    start_s = sorted(
        (datetime.fromisoformat(d["started_at"]) - due_wall).total_seconds()
        for d in documents.values()
        if d.get("started_at")
    )
    statuses: dict[str, int] = {}
    for document in documents.values():
        statuses[document["status"]] = statuses.get(document["status"], 0) + 1
    if pending:
        statuses["unfinished"] = len(pending)
    return {
        "variant": label,
        "load_at_start": load_at_start,
        "accepted": accepted,
        "refused": refused[:3],
        "statuses": statuses,
        "last_finished_s": finish_s[-1] if finish_s else None,
        "median_finished_s": statistics.median(finish_s) if finish_s else None,
        "last_accepted_s": max(accepted_s),
        "last_started_s": start_s[-1] if start_s else None,
        "median_started_s": statistics.median(start_s) if start_s else None,
        "peak_rss_mib": sampler.peak_rss_kib / 1024,
        "peak_pss_mib": sampler.peak_pss_kib / 1024,
        "children_at_peak": sampler.children_at_peak,
        "cpu_s": cpu_used,
        "worker_cpu_s": worker_cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=64)
    parser.add_argument("--delay-ms", type=int, default=1000)
    parser.add_argument("--baseline", type=Path, help="a checkout without the change")
    parser.add_argument("--variants", default="fetch,timer,baseline")
    parser.add_argument("--executions-per-child", type=int, default=None)
    args = parser.parse_args()
    wanted = args.variants.split(",")
    delay_ms = args.delay_ms
    server = SlowServer(delay_ms / 1000)
    admission = AdmissionPeer("grant")
    # The test peer listens with a backlog of 16; 64 permit requests arrive at once here, and a
    # refused connection would be the bench's fault, not the worker's (listen() again resizes).
    admission._sock.listen(256)
    engine: dict[str, Any] = {"max_concurrent": args.count, "max_queued": 0}
    if args.executions_per_child is not None:
        engine["executions_per_child"] = args.executions_per_child
    timer = f"new Promise(resolve => setTimeout(() => resolve('waited'), {delay_ms}))"
    fetch = f"fetch({json.dumps(server.url)}).then(r => r.json()).then(j => j.ok)"
    results = []
    try:
        with tempfile.TemporaryDirectory() as policy_dir:
            policy = Path(policy_dir) / "egress.rego"
            policy.write_text(ALLOW_LOOPBACK, encoding="utf-8")
            egress = {"egress": {"policy_file": str(policy)}, "engine": engine}
            if "fetch" in wanted:
                results.append(run_variant("fetch", ROOT, fetch, egress, args.count, admission))
            if "timer" in wanted:
                plain = {"engine": engine}
                results.append(run_variant("timer", ROOT, timer, plain, args.count, admission))
            if "baseline" in wanted and args.baseline is not None:
                results.append(
                    run_variant(
                        "baseline timer",
                        args.baseline.resolve(),
                        timer,
                        {"engine": {"max_concurrent": args.count, "max_queued": 0}},
                        args.count,
                        admission,
                    )
                )
    finally:
        admission.close()
        server.close()
    load = os.getloadavg()
    print(f"executions: {args.count}, each awaiting {delay_ms} ms; load average {load[0]:.1f}")
    for result in results:
        print(
            f"{result['variant']:>15} (load {result['load_at_start']:.1f}): "
            f"accepted {result['accepted']} "
            f"(refused: {result['refused'] or 'none'}), {result['statuses']}, "
            f"last finished {result['last_finished_s']:.2f} s after due "
            f"(median {result['median_finished_s']:.2f} s; last exec accepted "
            f"{result['last_accepted_s']:.2f} s; scripts started: last "
            f"{result['last_started_s']:.2f} s, median {result['median_started_s']:.2f} s); "
            "peak worker + children "
            f"RSS {result['peak_rss_mib']:.0f} MiB (PSS {result['peak_pss_mib']:.0f} MiB) "
            f"with {result['children_at_peak']} children; CPU of worker + children "
            f"{result['cpu_s']:.1f} s (the worker itself {result['worker_cpu_s']:.1f} s)"
        )


if __name__ == "__main__":
    main()
