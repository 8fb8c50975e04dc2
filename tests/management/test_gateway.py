"""The CommandGateway contract of BoundedCommandQueue (what the runner loop plugs into)."""

from __future__ import annotations

import pytest

from appliance.config.addresses import HostPort
from appliance.core.limits import Limits
from appliance.management import (
    COMMAND_QUEUE_SLOTS,
    BoundedCommandQueue,
    ManagementListener,
    NotLoopback,
    NotOwner,
    QueueFull,
    Uncertain,
    execute,
)
from tests.management.conftest import TOKENS


def test_the_queue_holds_exactly_64_commands_and_refuses_the_65th() -> None:
    gateway = BoundedCommandQueue()
    assert COMMAND_QUEUE_SLOTS == 64
    for n in range(64):
        gateway.submit({"action": "disable", "id": n + 1}, role="operator")
    with pytest.raises(QueueFull):
        gateway.submit({"action": "status"}, role="operator")
    assert len(gateway) == 64 and gateway.rejected_full == 1
    first = gateway.take_nowait()
    assert first is not None and first.command == {"action": "disable", "id": 1}  # FIFO
    gateway.submit({"action": "status"}, role="recovery")  # a freed slot is usable again


def test_unknown_roles_cannot_submit() -> None:
    with pytest.raises(ValueError, match="role"):
        BoundedCommandQueue().submit({"action": "status"}, role="worker")


def test_a_submitted_command_completes_exactly_once() -> None:
    gateway = BoundedCommandQueue()
    submitted = gateway.submit({"action": "status"}, role="operator")
    submitted.resolve({"ok": True, "node": "n1"})
    assert submitted.wait(0) == {"ok": True, "node": "n1"}
    with pytest.raises(RuntimeError, match="twice"):
        submitted.uncertain("late")


def test_waiting_past_the_timeout_is_uncertain_not_withdrawn() -> None:
    gateway = BoundedCommandQueue()
    submitted = gateway.submit({"action": "status"}, role="operator")
    with pytest.raises(Uncertain):
        submitted.wait(0.001)
    assert gateway.take_nowait() is submitted  # still queued for the loop


def test_execute_maps_handler_outcomes() -> None:
    gateway = BoundedCommandQueue()

    def raising(error: Exception):
        def handler(command):
            raise error

        return handler

    cases = [
        (lambda command: {"ok": True}, None),
        (raising(NotOwner("n2")), NotOwner),
        (raising(Uncertain("no quorum")), Uncertain),
        (raising(OSError("disk")), Uncertain),
    ]
    for handler, expected in cases:
        submitted = gateway.submit({"action": "status"}, role="operator")
        execute(gateway.take_nowait(), handler)
        if expected is None:
            assert submitted.wait(0) == {"ok": True}
        else:
            with pytest.raises(expected):
                submitted.wait(0)


def test_submitted_repr_never_shows_the_definition() -> None:
    submitted = BoundedCommandQueue().submit(
        {"action": "create", "definition": {"code": "SECRET"}}, role="operator"
    )
    assert "SECRET" not in repr(submitted)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.1", "localhost", "::", "192.168.1.2"])
def test_the_listener_refuses_non_loopback_addresses(host: str) -> None:
    with pytest.raises(NotLoopback):
        ManagementListener(HostPort(host, 0), BoundedCommandQueue(), TOKENS, Limits())


def test_the_listener_needs_an_operator_credential() -> None:
    tokens = {role: token for role, token in TOKENS.items() if role != "operator"}
    with pytest.raises(ValueError, match="operator"):
        ManagementListener(HostPort("127.0.0.1", 0), BoundedCommandQueue(), tokens, Limits())


def test_reused_credentials_are_refused() -> None:
    tokens = {**TOKENS, "recovery": TOKENS["operator"]}
    with pytest.raises(ValueError, match="differ"):
        ManagementListener(HostPort("127.0.0.1", 0), BoundedCommandQueue(), tokens, Limits())
