"""The membership methods of RaftReplication/RaftDriver: commit-then-return, the transport
learning a new member's address, the configuration in status(), refusals with their reason."""

from __future__ import annotations

import threading

import pytest

from appliance.raft import MemoryLogStorage, Message
from appliance.replication.errors import ProposalRefused
from appliance.replication.raft_replication import RaftReplication


class PeerRecorder:
    """A transport that records what it is asked to send and which peers it learns."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: list[Message] = []
        self.added: list[tuple[str, str]] = []
        self.removed: list[str] = []

    def send(self, message: Message) -> None:
        with self.lock:
            self.sent.append(message)

    def add_peer(self, peer: str, addr: str) -> bool:
        with self.lock:
            if (peer, addr) in self.added:
                return False
            self.added.append((peer, addr))
            return True

    def remove_peer(self, peer: str) -> bool:
        with self.lock:
            self.removed.append(peer)
            return True


def test_add_learner_commits_tells_the_transport_and_shows_in_status() -> None:
    transport = PeerRecorder()
    replication = RaftReplication(
        node_id="n1",
        voters=("n1",),
        storage=MemoryLogStorage(),
        transport=transport,
        apply=lambda index, command: None,
    )
    replication.start()
    try:
        replication.propose(b"first", timeout_s=5)
        replication.add_learner("n2", "127.0.0.1:7402", timeout_s=5)
        status = replication.status()
        assert status["configuration"]["learners"] == ["n2"]
        assert status["configuration"]["addresses"] == {"n2": "127.0.0.1:7402"}
        assert status["config_change_pending"] is False
        assert status["member_status"].startswith("voter")
        assert transport.added == [("n2", "127.0.0.1:7402")]
        with transport.lock:
            assert any(m.to == "n2" for m in transport.sent)  # the leader replicates to it
        # The learner never answered: it has not caught up, so promotion is refused.
        with pytest.raises(ProposalRefused, match="has not caught up"):
            replication.promote("n2", timeout_s=5)
        with pytest.raises(ProposalRefused, match="already a learner"):
            replication.add_learner("n2", "127.0.0.1:7402", timeout_s=5)
        replication.remove("n2", timeout_s=5)
        assert replication.status()["configuration"]["learners"] == []
        assert transport.removed == ["n2"]
    finally:
        replication.stop()
