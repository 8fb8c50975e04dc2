"""SIGHUP reloads the worker's ``admission_urls`` and nothing else (appliance.worker.reload).

A voter added to the cluster can become the owner; the worker must be able to ask it for permits
without a restart that cancels its running executions. The rule, then the client's list swap, then
a real worker process taking a new list on SIGHUP, refusing a file that changes anything else,
and going on with its old list when the new file does not validate.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from appliance.config.addresses import HostPort
from appliance.config.credentials import Secret
from appliance.config.urls import parse_origin
from appliance.config.worker import parse_worker_config
from appliance.core.errors import InvalidConfig
from appliance.http import HttpClient
from appliance.worker.admission import AdmissionClient
from appliance.worker.reload import reloaded_admission_urls
from appliance.worker.runtime import Worker, load_settings
from appliance.worker.wire import parse_exec
from tests.support import wait_for
from tests.worker.peers import (
    ADMISSION_TOKEN,
    AdmissionPeer,
    WorkerProcess,
    closed_port,
    exec_body,
    execution_id,
    running_worker,
)

INCARNATION = "incarnation-reload-1"
CONFIG: dict[str, Any] = {
    "namespace": "ns",
    "worker_id": "w1",
    "data_dir": "/tmp/unused",
    "bearer_env": "W_TOKEN",
    "admission_bearer_env": "A_TOKEN",
    "admission_urls": ["http://127.0.0.1:4501"],
    "listen_addr": "127.0.0.1:4600",
}


def _config(**changes: Any):
    return parse_worker_config({**CONFIG, **changes})


def test_a_file_that_changes_only_admission_urls_gives_its_urls() -> None:
    urls = ["http://127.0.0.1:4502", "http://127.0.0.1:4501"]
    taken = reloaded_admission_urls(_config(), _config(admission_urls=urls))
    assert [origin.url for origin in taken] == urls
    assert reloaded_admission_urls(_config(), _config()) == _config().admission_urls


def test_a_file_that_changes_any_other_field_is_refused_naming_each_one() -> None:
    fresh = _config(
        admission_urls=["http://127.0.0.1:4502"],
        listen_addr="127.0.0.1:4601",
        engine={"max_concurrent": 8},
    )
    with pytest.raises(InvalidConfig) as caught:
        reloaded_admission_urls(_config(), fresh)
    named = [path for path, _ in caught.value.problems]
    assert named == ["listen_addr", "engine"]
    assert all("restart the worker" in message for _, message in caught.value.problems)


def test_every_field_but_admission_urls_is_compared() -> None:
    """A field added to WorkerConfig later is refused on reload until it is made reloadable."""
    base = _config()
    for field in dataclasses.fields(base):
        if field.name == "admission_urls":
            continue
        value = getattr(base, field.name)
        other = HostPort("127.0.0.1", 4999) if field.name.endswith("addr") else f"{value}x"
        with pytest.raises(InvalidConfig) as caught:
            reloaded_admission_urls(base, dataclasses.replace(base, **{field.name: other}))
        assert [path for path, _ in caught.value.problems] == [field.name]


def test_a_worker_configured_from_the_environment_has_no_file_to_reload(
    caplog: pytest.LogCaptureFixture,
) -> None:
    environ = {
        "MCP_SCHEDULED_WORKER_CONFIG": json.dumps(CONFIG),
        "W_TOKEN": "worker-token-for-the-reload-test",
        "A_TOKEN": "admission-token-for-the-reload-test",
    }
    worker = Worker(load_settings(environ, None))
    with caplog.at_level("WARNING", logger="appliance.worker"):
        assert worker.reload(environ, None) is False
    assert "came from MCP_SCHEDULED_WORKER_CONFIG, not from a file" in caplog.text


def _admission(client: HttpClient, *peers: AdmissionPeer) -> AdmissionClient:
    urls = tuple(parse_origin(peer.url) for peer in peers)
    return AdmissionClient(urls, Secret(ADMISSION_TOKEN), INCARNATION, client)


def _permit_urls(admission: AdmissionClient, occurrence_id: int) -> list[str]:
    request = parse_exec(exec_body("1", occurrence_id=occurrence_id))
    result = admission.request_permit(request.binding, request.document)
    assert result.kind == "granted", result
    return [attempt.url for attempt in result.attempts]


def test_a_replaced_list_is_used_from_the_next_pass_keeping_the_owner_first(peers) -> None:
    not_owner, owner, added = peers("409"), peers("grant"), peers("409")
    client = HttpClient(read_timeout_ms=5_000)
    try:
        admission = _admission(client, not_owner, owner)
        assert _permit_urls(admission, 1) == [not_owner.url, owner.url]
        admission.replace_urls(tuple(parse_origin(p.url) for p in (added, not_owner, owner)))
        assert _permit_urls(admission, 2) == [owner.url]  # the owner is still asked first
        owner.mode, added.mode = "409", "grant"  # the added voter took over
        assert _permit_urls(admission, 3) == [owner.url, added.url]
        admission.replace_urls((parse_origin(added.url),))  # the owner's URL is gone: start at 0
        assert _permit_urls(admission, 4) == [added.url]
        with pytest.raises(ValueError):
            admission.replace_urls(())
        assert [o.url for o in admission.urls] == [added.url]
    finally:
        client.close()


def test_a_pass_under_way_finishes_over_the_list_it_started_with(peers) -> None:
    first, second, replacement = peers("409"), peers("grant"), peers("grant")
    client = HttpClient(read_timeout_ms=5_000)
    try:
        admission = _admission(client, first, second)
        request = parse_exec(exec_body("1", occurrence_id=1))
        steps = admission.permit_pass(request.binding, request.document)
        url, body = next(steps)
        assert url.startswith(first.url)
        admission.replace_urls((parse_origin(replacement.url),))
        reply = client.post(url, body, bearer=Secret(ADMISSION_TOKEN))  # ``first`` answers 409
        url, _ = steps.send(reply)
        assert url.startswith(second.url)  # the old list's next entry, as when the pass began
        assert replacement.requests == []
    finally:
        client.close()


def _write(worker: WorkerProcess, doc: dict[str, Any], **changes: Any) -> None:
    worker.config_path.write_text(json.dumps({**doc, **changes}))


def _hup_and_wait(worker: WorkerProcess, said: str) -> None:
    before = worker.log().count(said)
    worker.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: worker.log().count(said) > before or None, f"the worker logs {said!r}", 15)


def test_a_running_worker_takes_new_admission_urls_on_sighup(tmp_path: Path, peers) -> None:
    owner = peers("grant")
    with running_worker(tmp_path, [f"http://127.0.0.1:{closed_port()}"]) as worker:
        original = json.loads(worker.config_path.read_text())
        answer = worker.exec(exec_body("1", occurrence_id=1))
        assert answer.status == 503
        assert answer.json()["error"]["code"] == "admission_unavailable"

        # A file that also changes the engine is refused whole: the old list stays.
        _write(worker, original, admission_urls=[owner.url], engine={"max_concurrent": 3})
        _hup_and_wait(worker, "SIGHUP: config not reloaded: engine: changed")
        assert worker.exec(exec_body("1", occurrence_id=2)).status == 503
        # So is a file that does not validate.
        worker.config_path.write_text("{not json")
        _hup_and_wait(worker, "SIGHUP: config not reloaded")
        assert worker.exec(exec_body("1", occurrence_id=3)).status == 503
        assert owner.requests == []

        _write(worker, original, admission_urls=[owner.url])
        _hup_and_wait(worker, f"SIGHUP: admission_urls reloaded: {owner.url} (were http://")
        assert worker.exec(exec_body("1", occurrence_id=4)).status == 202
        assert worker.wait_terminal(execution_id(4))["status"] == "completed"
        assert len(owner.requests) == 1
        _hup_and_wait(worker, "SIGHUP: config reloaded, admission_urls unchanged")
        assert worker.proc.poll() is None  # SIGHUP reloads; it does not end the process


# ---- issue 36, finding 3: a config path that is not a regular file ----------------------------

STOP_WITHIN_S = 20.0


def test_sighup_with_a_fifo_config_is_refused_and_sigterm_still_stops_the_worker(
    tmp_path: Path,
) -> None:
    """The config path replaced by a FIFO (nobody writes to it): the reload refuses it without
    blocking, the worker keeps serving, a later SIGHUP is still answered, and SIGTERM stops it.
    Before, the main thread blocked in ``open()`` and ignored SIGTERM for good."""
    with running_worker(tmp_path, [f"http://127.0.0.1:{closed_port()}"]) as worker:
        worker.config_path.unlink()
        os.mkfifo(worker.config_path)
        _hup_and_wait(worker, "SIGHUP: config not reloaded: $: ")
        assert "is not a regular file (a FIFO)" in worker.log()
        assert worker.observe("s1-o1-a1").status == 404  # still serving
        _hup_and_wait(worker, "is not a regular file (a FIFO)")  # and still answering SIGHUP
        worker.proc.send_signal(signal.SIGTERM)
        assert worker.wait_exit(STOP_WITHIN_S) == 0


def test_a_fresh_start_refuses_a_config_that_is_not_a_regular_file(tmp_path: Path) -> None:
    from tests.worker.test_startup import TOKENS, start

    fifo = tmp_path / "worker.json"
    os.mkfifo(fifo)
    result = start(TOKENS, "--config", str(fifo), timeout_seconds=STOP_WITHIN_S)
    assert result.returncode == 2, result.stderr
    assert f"config: $: {fifo} is not a regular file (a FIFO)" in result.stderr
    result = start(TOKENS, "--config", str(tmp_path), timeout_seconds=STOP_WITHIN_S)
    assert result.returncode == 2 and "is not a regular file (a directory)" in result.stderr
    assert not (tmp_path / "data").exists()


def test_a_reload_that_blocks_never_holds_the_caller_and_one_runs_at_a_time(caplog) -> None:
    """A hung network file system blocks ``open()``/``read()`` whatever the flags: the reload
    runs on its own thread, so the main thread's request returns at once; a SIGHUP meanwhile is
    ignored (and said), and once the blocked read ends the next one runs again."""
    import threading

    from appliance.worker.reload import BackgroundReload

    release = threading.Event()
    started: list[int] = []

    def blocked_reload() -> None:
        started.append(1)
        release.wait(30)

    reloads = BackgroundReload(blocked_reload)
    assert reloads.request() is True
    wait_for(lambda: started or None, "the reload thread started", 5)
    with caplog.at_level("WARNING", logger="appliance.worker"):
        assert reloads.request() is False
    assert "SIGHUP: ignored: the previous reload has been reading" in caplog.text
    assert started == [1]
    release.set()
    assert reloads.wait(5)
    assert reloads.request() is True and reloads.wait(5) and started == [1, 1]
