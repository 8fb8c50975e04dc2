"""Fixtures: credentials of every role, a fake runner behind a real bounded queue, the app."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import falcon.testing
import pytest

from appliance.config.addresses import HostPort
from appliance.core.limits import Limits
from appliance.management import (
    BoundedCommandQueue,
    ManagementListener,
    ManagementOptions,
    ThreadedConsumer,
    create_management_app,
)
from tests.management.fake_runner import FakeRunner

TOKENS = {
    "operator": "op-token-aaaa1111",
    "recovery": "rec-token-bbbb2222",
    "worker": "wrk-token-cccc3333",
    "admission": "adm-token-dddd4444",
    "cluster": "clu-token-eeee5555",
}
DEFINITION = {
    "name": "example",
    "code": "console.log('scheduled')",
    "cron": "* * * * *",
    "timezone": "UTC",
    "policy": {
        "missed": "Skip",
        "overlap": "Skip",
        "retry": {"max_retries": 0, "delay_seconds": 0},
    },
}


def bearer(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role]}"}


@dataclass
class Harness:
    runner: FakeRunner
    gateway: BoundedCommandQueue
    consumer: ThreadedConsumer
    client: falcon.testing.TestClient


def make_harness(tokens: dict[str, str], options: ManagementOptions | None = None) -> Harness:
    runner = FakeRunner()
    gateway = BoundedCommandQueue()
    consumer = ThreadedConsumer(gateway, runner.handle).start()
    app = create_management_app(gateway, tokens, Limits(), options)
    return Harness(runner, gateway, consumer, falcon.testing.TestClient(app))


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = make_harness(TOKENS)
    yield h
    h.consumer.stop()


@pytest.fixture
def no_recovery_harness() -> Iterator[Harness]:
    tokens = {role: token for role, token in TOKENS.items() if role != "recovery"}
    h = make_harness(tokens)
    yield h
    h.consumer.stop()


@dataclass
class Live:
    runner: FakeRunner
    gateway: BoundedCommandQueue
    consumer: ThreadedConsumer
    listener: ManagementListener

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.listener.port}"


def start_live(options: ManagementOptions | None = None) -> Live:
    runner = FakeRunner()
    gateway = BoundedCommandQueue()
    consumer = ThreadedConsumer(gateway, runner.handle).start()
    listener = ManagementListener(
        HostPort("127.0.0.1", 0), gateway, TOKENS, Limits(), options, threads=4
    ).start()
    return Live(runner, gateway, consumer, listener)


@pytest.fixture
def live() -> Iterator[Live]:
    running = start_live()
    yield running
    running.listener.stop()
    running.consumer.stop()
