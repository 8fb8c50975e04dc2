"""dist/appliance.pyz: one file that runs every role from anywhere, extracting into its cache.

These tests share one build (see conftest); the timeout covers it for whichever test runs first.
"""

from __future__ import annotations

import itertools
import json
import queue
import signal
import subprocess
import sys
import threading
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from appliance.cluster_init.layout import PORT_SPAN, lay_out
from appliance.cluster_init.writer import write_cluster
from tests.cluster_init.processes import decisions, free_port_block, started, wait_for_outcome

from .conftest import Zipapp

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ONE_SHOT_ENGINE = """
from appliance.engine import Engine, ExecutionRequest, ScheduledInfo
from appliance.engine.process import child_environment
import json
engine = Engine(max_concurrent=1, max_queued=0, warm_children=0)
try:
    request = ExecutionRequest(
        execution_id="from-the-zipapp",
        code="console.log('hello from', scheduled.schedule_id); 6 * 7",
        scheduled=ScheduledInfo(
            namespace="ns", schedule_id="zipapp", schedule_name="zipapp", occurrence_id="1",
            attempt=1, ownership_epoch=1, due_time="2026-11-29T00:00:00Z",
        ),
        heap_mb=64,
        timeout_seconds=20,
    )
    submitted = engine.reserve().capability(request, lambda: True).submit()
    report = engine.wait(submitted.execution_id, 45)
    print(json.dumps({
        "status": report.status.value, "result": report.result, "output": report.output,
        "pid": report.pid, "child_pythonpath": child_environment().get("PYTHONPATH", ""),
    }))
finally:
    engine.shutdown(wait_seconds=10)
"""


def test_help_lists_every_role_from_another_directory(zipapp: Zipapp) -> None:
    completed = zipapp.run("--help")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith("usage: appliance")
    for role in ("runner", "worker", "admin", "quickstart"):
        assert role in completed.stdout


def test_cron_preview_runs_from_the_zipapp(zipapp: Zipapp) -> None:
    completed = zipapp.run(
        "admin", "cron", "next", "--cron", "*/5 * * * *", "--timezone", "UTC", "--count", "3"
    )
    assert completed.returncode == 0, completed.stderr
    instants = [
        datetime.fromisoformat(line.split()[0].replace("Z", "+00:00"))
        for line in completed.stdout.splitlines()[1:]
        if line.strip()
    ]
    assert len(instants) == 3
    assert all(instant.minute % 5 == 0 and instant.second == 0 for instant in instants)
    steps = {(b - a).total_seconds() for a, b in itertools.pairwise(instants)}
    assert steps == {300.0}


def test_config_check_accepts_a_generated_cluster_from_the_zipapp(
    zipapp: Zipapp, tmp_path: Path
) -> None:
    out = tmp_path / "cluster"
    write_cluster(lay_out(3, 7100, out, datetime.now(UTC)), out)
    digests = set()
    for i in (1, 2, 3):
        completed = zipapp.run("admin", "config", "check", str(out / f"voter-{i}.json"))
        assert completed.returncode == 0, completed.stderr
        assert completed.stdout.startswith("ok\n")
        digests |= {line for line in completed.stdout.splitlines() if "contract digest" in line}
    assert len(digests) == 1
    worker = zipapp.run("admin", "config", "check", str(out / "worker.json"), "--worker")
    assert worker.returncode == 0, worker.stderr


def test_config_check_reports_problems_from_the_zipapp(zipapp: Zipapp, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"node_id": "n1"}))
    completed = zipapp.run("admin", "config", "check", str(bad))
    assert completed.returncode == 2
    assert "peers" in completed.stderr


def test_the_package_is_imported_from_the_configured_cache_directory(zipapp: Zipapp) -> None:
    code = "import appliance, os; print(appliance.__file__); print(os.environ['PYTHONPATH'])"
    completed = zipapp.run("-c", code, SHIV_INTERPRETER="1")
    assert completed.returncode == 0, completed.stderr
    package_file, pythonpath = completed.stdout.splitlines()
    cache = str(zipapp.cache_dir.resolve())
    assert package_file.startswith(cache + "/appliance.pyz_")
    assert package_file.endswith("/site-packages/appliance/__init__.py")
    assert pythonpath.startswith(cache)


def test_an_engine_child_starts_from_inside_the_zipapp(zipapp: Zipapp) -> None:
    completed = zipapp.run("-c", ONE_SHOT_ENGINE, SHIV_INTERPRETER="1")
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout.splitlines()[-1])
    assert report["status"] == "completed", report
    assert report["result"] == 42
    assert report["output"] == "hello from zipapp\n"
    assert report["pid"] is not None
    assert report["child_pythonpath"].startswith(str(zipapp.cache_dir.resolve()))


EGRESS_POLICY = """
from appliance.egress.policy import SAMPLE_INPUT, RegoPolicy
policy = RegoPolicy.load(
    'package appliance.egress\\nimport rego.v1\\nallow if input.method == "GET"\\n', "p.rego"
)
put = {**SAMPLE_INPUT, "method": "PUT"}
print(policy.evaluate(SAMPLE_INPUT, 5).allowed, policy.evaluate(put, 5))
"""


def test_the_egress_policy_runtime_loads_from_inside_the_zipapp(zipapp: Zipapp) -> None:
    # regopy carries a native library: shiv must extract it, as it does mini-racer's.
    completed = zipapp.run("-c", EGRESS_POLICY, SHIV_INTERPRETER="1")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines()[-1].startswith("True Decision(allowed=False")


def test_an_unwritable_cache_directory_is_refused_with_advice(
    zipapp: Zipapp, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    completed = zipapp.run("--help", APPLIANCE_CACHE_DIR=str(blocker / "cache"))
    assert completed.returncode == 1
    assert "set APPLIANCE_CACHE_DIR to a private directory" in completed.stderr


def test_the_archive_records_the_interpreter_it_was_built_for(zipapp: Zipapp) -> None:
    with zipfile.ZipFile(zipapp.path) as archive:
        main = archive.read("__main__.py").decode()
        names = set(archive.namelist())
    expected = f"'python': '{sys.version_info[0]}.{sys.version_info[1]}'"
    assert expected in main
    assert "site-packages/appliance/__init__.py" in names
    assert "site-packages/py_mini_racer/__init__.py" in names
    assert not any(name.startswith("site-packages/bin/") for name in names)
    assert not any(name.endswith(".pyc") for name in names)


def _lines(stream: subprocess.Popen[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert stream.stdout is not None
        for line in stream.stdout:
            lines.put(line)
        lines.put("")  # EOF

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _until(lines: queue.Queue[str], predicate: str, timeout_s: float = 60.0) -> list[str]:
    seen: list[str] = []
    while True:
        line = lines.get(timeout=timeout_s)
        seen.append(line)
        if line == "" or predicate in line:
            return seen


def test_quickstart_starts_its_worker_from_the_zipapp_and_stops_cleanly(
    zipapp: Zipapp, tmp_path: Path
) -> None:
    proc = subprocess.Popen(
        zipapp.argv("quickstart", "--data-dir", str(tmp_path / "qs")),
        cwd=zipapp.elsewhere,
        env=zipapp.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = _lines(proc)
        banner = _until(lines, "Ctrl-C stops both")
        assert "Ctrl-C stops both" in banner[-1], "".join(banner)
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"action": "list"}) + "\n")
        proc.stdin.flush()
        reply = _until(lines, '"schedules"')
        assert '"schedules"' in reply[-1], "".join(reply)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        assert "stopped" in "".join(_until(lines, "stopped"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_one_voter_cluster_runs_its_runner_and_worker_roles_from_the_zipapp(
    zipapp: Zipapp, tmp_path: Path
) -> None:
    """Both roles started as `python appliance.pyz ROLE`; the worker's engine child too."""
    out = tmp_path / "cluster"
    files = lay_out(1, free_port_block(PORT_SPAN), out, datetime.now(UTC))
    write_cluster(files, out)
    env = zipapp.env(APPLIANCE_TESTING="1", **files.credentials)
    argv_list = [
        zipapp.argv("runner", "voter-1.json", "--time-scale", "60"),
        zipapp.argv("worker", "--config", "worker.json"),
    ]
    with started(argv_list, out, env) as logs:
        outcomes = wait_for_outcome(logs[:1], 60.0)
        events = decisions(logs[0])
    assert outcomes, f"no outcome within 60 s; the voter logged {events}"
    assert outcomes[0]["state"] == "Succeeded", outcomes[0]
