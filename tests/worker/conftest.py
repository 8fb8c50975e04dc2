"""Fixtures shared by the worker tests: a granting admission peer and a worker process using it.

Both are module-scoped, and pytest builds a module-scoped fixture once per module that uses it:
every test module gets its own peer and its own worker, and the tests of a module keep apart by
occurrence id. A module that needs a fresh peer per test (crash, restart: they count the requests
one test caused) or a worker with another admission URL (routes) defines its own fixture of the
same name, which takes precedence. ``peers`` starts fresh scripted admission peers per test (a
mode each: "grant", "409", "403", "drop", …) and closes them after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.worker.peers import AdmissionPeer, WorkerProcess, running_worker


@pytest.fixture(scope="module")
def admission() -> Iterator[AdmissionPeer]:
    peer = AdmissionPeer("grant")
    yield peer
    peer.close()


@pytest.fixture(scope="module")
def worker(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    admission: AdmissionPeer,
) -> Iterator[WorkerProcess]:
    name = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    with running_worker(tmp_path_factory.mktemp(name), [admission.url]) as process:
        yield process


@pytest.fixture
def peers() -> Iterator[Callable[[str], AdmissionPeer]]:
    started: list[AdmissionPeer] = []

    def start(mode: str) -> AdmissionPeer:
        peer = AdmissionPeer(mode)
        started.append(peer)
        return peer

    yield start
    for peer in started:
        peer.close()
