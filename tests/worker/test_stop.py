"""Stopping the worker: a step that fails does not keep the later ones from running.

A listener whose event loop will not stop must still let the engine shut down (its threads would
otherwise keep the process alive after SIGTERM) and the store close (its data_dir lock would
otherwise refuse the next worker)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from appliance.http import ServerError
from appliance.store.worker_store import WorkerStore
from appliance.worker.runtime import Worker, load_settings
from tests.worker.peers import NAMESPACE, WORKER_ID
from tests.worker.test_startup import TOKENS, config


def test_a_listener_that_will_not_stop_still_leaves_the_engine_down_and_the_store_closed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "worker.json"
    path.write_text(json.dumps(config(tmp_path)))
    settings = load_settings(TOKENS, str(path))
    worker = Worker(settings)
    worker.start()
    server, engine = worker.server, worker.engine
    assert server is not None and engine is not None

    def stuck() -> None:
        raise ServerError("worker: event loop did not stop in 5.0s")

    server.stop = stuck  # type: ignore[method-assign]
    try:
        with caplog.at_level(logging.ERROR, logger="appliance.worker"):
            worker.stop()
        assert "stopping the listener failed; stopping the rest anyway" in caplog.text
        assert (worker.server, worker.engine, worker.store) == (None, None, None)
        assert engine.child_pids() == frozenset()  # its children were stopped and reaped
        # The data_dir lock went with the store: the next worker's store opens.
        WorkerStore.create_or_open(
            settings.config.data_dir, namespace=NAMESPACE, worker_id=WORKER_ID, now_ms=1_000
        ).close()
    finally:
        del server.stop  # the real one again, so the listener does not outlive the test
        server.stop()


def test_the_stop_notice_says_what_is_stopped_and_for_how_long() -> None:
    from appliance.worker.runtime import ENGINE_SHUTDOWN_SECONDS, stop_notice

    class Busy:
        def stats(self):  # type: ignore[no-untyped-def]
            from types import SimpleNamespace

            return SimpleNamespace(running=2, queued=1)

    class Idle:
        def stats(self):  # type: ignore[no-untyped-def]
            from types import SimpleNamespace

            return SimpleNamespace(running=0, queued=0)

    busy = stop_notice(Busy())  # type: ignore[arg-type]
    assert "2 running and 1 queued execution(s) are cancelled" in busy
    assert f"waiting up to {ENGINE_SHUTDOWN_SECONDS:g} s" in busy
    assert stop_notice(Idle()) == "appliance worker: stopping: no execution is running"  # type: ignore[arg-type]
    assert stop_notice(None) == "appliance worker: stopping"
