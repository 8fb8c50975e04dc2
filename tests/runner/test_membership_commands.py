"""The membership commands' answers (appliance/runner/membership_commands.py): definite unless the
wait ran out, and an unknown outcome always carries the configuration seen now."""

from __future__ import annotations

from typing import Any

import pytest

from appliance.commands.operator import OperatorCommand
from appliance.management.replies import run_command
from appliance.replication.errors import NotLeader, Overloaded, ProposalLost, ProposalRefused
from appliance.runner.membership_commands import ETCD_REFUSAL, membership_reply

CONFIG = {"voters": ["v1", "v2", "v3"], "learners": ["v4"], "addresses": {"v4": "127.0.0.1:9"}}


class Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def emit(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))


class FakeReplication:
    """Records each call; raises ``raises`` if given."""

    def __init__(self, raises: BaseException | None = None) -> None:
        self.raises = raises
        self.calls: list[tuple[Any, ...]] = []

    def _call(self, *args: Any, timeout_s: float) -> None:
        self.calls.append((*args, timeout_s))
        if self.raises is not None:
            raise self.raises

    def add_learner(self, node_id: str, address: str, *, timeout_s: float) -> None:
        self._call("add_learner", node_id, address, timeout_s=timeout_s)

    def promote(self, node_id: str, *, timeout_s: float) -> None:
        self._call("promote", node_id, timeout_s=timeout_s)

    def remove(self, node_id: str, *, timeout_s: float) -> None:
        self._call("remove", node_id, timeout_s=timeout_s)

    def status(self) -> dict[str, Any]:
        return {
            "leader_id": "v1",
            "configuration": CONFIG,
            "config_index": 12,
            "config_change_pending": True,
            "member_status": "voter in the configuration at index 12",
            "term": 3,
        }


class EtcdLike:
    """The etcd replication: no membership methods."""

    def status(self) -> dict[str, Any]:
        return {}


ADD = OperatorCommand("add_voter", {"id": "v4", "address": "127.0.0.1:9"})
PROMOTE = OperatorCommand("promote_voter", {"id": "v4"})
REMOVE = OperatorCommand("remove_voter", {"id": "v1"})


def test_each_command_calls_its_replication_method_once() -> None:
    replication = FakeReplication()
    for command in (ADD, PROMOTE, REMOVE):
        reply = membership_reply(replication, command, Log(), timeout_s=3.0)
        assert reply["ok"] is True and reply["id"] == command.args["id"]
        assert reply["configuration"] == CONFIG and reply["config_change_pending"] is True
    assert replication.calls == [
        ("add_learner", "v4", "127.0.0.1:9", 3.0),
        ("promote", "v4", 3.0),
        ("remove", "v1", 3.0),
    ]


def test_a_refused_change_is_definite_and_names_the_reason() -> None:
    reason = "learner v4 has not caught up: it holds the log up to 10, the commit index is 50"
    log = Log()
    reply = membership_reply(FakeReplication(ProposalRefused(reason)), PROMOTE, log)
    assert reply["status"] == 400 and reply["error"]["code"] == "refused"
    assert reply["error"]["message"] == f"promote_voter: {reason}"
    assert "outcome" not in reply
    assert log.events[0][0] == "membership_refused"


def test_on_a_follower_the_answer_is_the_not_owner_answer_with_the_hint() -> None:
    reply = membership_reply(FakeReplication(NotLeader("v2")), ADD, Log())
    assert reply["status"] == 409 and reply["error"]["code"] == "not_owner"
    assert reply["error"]["leader_hint"] == "v2"


def test_a_full_inbox_is_definitely_not_accepted() -> None:
    reply = membership_reply(FakeReplication(Overloaded("full")), REMOVE, Log())
    assert (reply["status"], reply["accepted"]) == (503, False)


@pytest.mark.parametrize(
    "error", [TimeoutError("configuration change outcome unknown after 10 s"), ProposalLost("x")]
)
def test_an_unknown_outcome_says_so_with_the_configuration_and_is_not_retried(
    error: BaseException,
) -> None:
    replication = FakeReplication(error)
    reply = membership_reply(replication, ADD, Log())
    assert len(replication.calls) == 1  # never retried on its own
    assert reply["status"] == 503
    assert (reply["outcome"], reply["retry_safe"]) == ("uncertain", False)
    assert reply["error"]["configuration"] == CONFIG
    assert reply["error"]["config_change_pending"] is True


def test_on_the_etcd_backend_the_commands_are_a_definite_refusal() -> None:
    for command in (ADD, PROMOTE, REMOVE):
        reply = membership_reply(EtcdLike(), command, Log())
        assert reply["status"] == 400 and reply["error"]["code"] == "refused"
        assert ETCD_REFUSAL in reply["error"]["message"]


class Gateway:
    """A gateway whose loop answers ``reply`` (the stdin shape)."""

    def __init__(self, reply: dict[str, Any]) -> None:
        self.reply = reply

    def submit(self, command: Any, *, role: str) -> Gateway:
        return self

    def wait(self, timeout_s: float) -> dict[str, Any]:
        return self.reply


def _http(raises: BaseException | None, command: OperatorCommand = ADD) -> Any:
    reply = membership_reply(FakeReplication(raises), command, Log())
    return run_command(Gateway(reply), {"action": command.action, **command.args}, "admin")  # type: ignore[arg-type]


def test_over_http_a_refusal_is_422_and_a_follower_409() -> None:
    refused = _http(ProposalRefused("a configuration change is in flight"))
    assert refused.status == 422 and "in flight" in refused.body["error"]["message"]
    follower = _http(NotLeader("v3"))
    assert follower.status == 409 and follower.body["leader_hint"] == "v3"
    etcd = run_command(
        Gateway(membership_reply(EtcdLike(), PROMOTE, Log())),  # type: ignore[arg-type]
        {"action": "promote_voter", "id": "v4"},
        "admin",
    )
    assert etcd.status == 422 and "etcd's business" in etcd.body["error"]["message"]


def test_over_http_an_unknown_outcome_carries_the_configuration_in_force() -> None:
    outcome = _http(TimeoutError("configuration change outcome unknown after 10 s"))
    assert outcome.status == 503
    assert (outcome.body["outcome"], outcome.body["retry_safe"]) == ("uncertain", False)
    assert outcome.body["configuration"] == CONFIG
    assert outcome.body["config_change_pending"] is True
    assert outcome.body["leader"] == "v1"


def test_over_http_a_committed_change_shows_the_configuration() -> None:
    outcome = _http(None, PROMOTE)
    assert outcome.status == 200
    assert outcome.body["result"]["configuration"] == CONFIG
    assert "voter" in outcome.body["meaning"]


def test_the_etcd_replication_has_none_of_the_membership_methods() -> None:
    # The refusal above is what the runner answers on the etcd backend: it looks the method up.
    from appliance.commands.table import COMMANDS
    from appliance.replication.etcd import EtcdReplication
    from appliance.replication.raft_replication import RaftReplication
    from appliance.runner.membership_commands import MEMBERSHIP_ACTIONS

    for action in MEMBERSHIP_ACTIONS:
        method = COMMANDS[action].membership
        assert method is not None and hasattr(RaftReplication, method)
        assert not hasattr(EtcdReplication, method), method
