"""Snapshots and log compaction in the Raft core (thesis §5): compaction, InstallSnapshot in
chunks, checksum and ordering refusals, crashes mid-transfer, and the wire format."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from appliance.raft import (
    AppendResponse,
    CodecError,
    MemoryLogStorage,
    Message,
    RaftConfig,
    RaftInvariantError,
    RaftNode,
    Role,
    codec,
)
from appliance.raft.compaction import CompactionPolicy
from appliance.raft.messages import SnapshotChunk, SnapshotResponse
from appliance.raft.progress import ProgressState
from appliance.raft.snapshot import snapshot_checksum

VOTERS = ("n1", "n2", "n3")
DIGEST = "d" * 64


class Cluster:
    """Three nodes over MemoryLogStorage; the application state is the list of applied data."""

    def __init__(self, chunk_bytes: int = 7, batch_entries_max: int = 32) -> None:
        self.chunk_bytes = chunk_bytes
        self.batch_entries_max = batch_entries_max
        self.storage = {n: MemoryLogStorage() for n in VOTERS}
        self.applied: dict[str, list[bytes]] = {n: [] for n in VOTERS}
        self.nodes: dict[str, RaftNode | None] = {}
        self.outbox: list[Message] = []
        self.installs: dict[str, int] = {n: 0 for n in VOTERS}
        for node_id in VOTERS:
            self.start(node_id)

    def start(self, node_id: str) -> RaftNode:
        storage = self.storage[node_id]
        index, data = storage.checkpoint()
        self.applied[node_id] = data.split(b"|") if data else []
        node = RaftNode(
            RaftConfig(
                node_id,
                VOTERS,
                snapshot_chunk_bytes=self.chunk_bytes,
                batch_entries_max=self.batch_entries_max,
            ),
            storage,
            random.Random(node_id),
            applied_index=index,
        )
        self.nodes[node_id] = node
        return node

    def node(self, node_id: str) -> RaftNode:
        node = self.nodes[node_id]
        assert node is not None
        return node

    def process(self, node_id: str) -> None:
        node, storage = self.node(node_id), self.storage[node_id]
        while node.has_ready():
            ready = node.ready()
            if ready.snapshot is not None:
                storage.install_snapshot(ready.snapshot)
                self.applied[node_id] = ready.snapshot.data.split(b"|")
                self.installs[node_id] += 1
            storage.persist(
                term=ready.hard_state.term,
                voted_for=ready.hard_state.voted_for,
                truncate_from=ready.truncate_from,
                entries=ready.stored_entries(),
            )
            self.outbox.extend(ready.messages)
            self.applied[node_id].extend(e.data for e in ready.committed if e.data)
            node.advance(ready)

    def deliver(self, keep: Callable[[Message], bool] = lambda m: True, rounds: int = 200) -> None:
        for _ in range(rounds):
            if not self.outbox:
                return
            batch, self.outbox = self.outbox, []
            for message in batch:
                target = self.nodes.get(message.to)
                if target is None or not keep(message):
                    continue
                target.step(message)
                self.process(message.to)

    def checkpoint(self, node_id: str) -> None:
        node = self.node(node_id)
        data = b"|".join(self.applied[node_id])
        self.storage[node_id].save_checkpoint(node.applied_index, data)

    def compact(self, node_id: str, index: int) -> None:
        node = self.node(node_id)
        term = node.compact(index)
        self.storage[node_id].compact(index, term, VOTERS)

    def elect(self, node_id: str = "n1") -> RaftNode:
        node = self.node(node_id)
        node.campaign()
        self.process(node_id)
        self.deliver()
        assert node.role is Role.LEADER
        return node

    def heartbeats(self, rounds: int, keep: Callable[[Message], bool] = lambda m: True) -> None:
        for _ in range(rounds):
            self.node("n1").tick()
            self.process("n1")
            self.deliver(keep)

    def propose(self, count: int, tag: str = "c") -> None:
        leader = self.node("n1")
        for i in range(count):
            leader.propose(f"{tag}{i}".encode())
            self.process("n1")
            self.deliver()


def test_a_follower_behind_the_compacted_log_gets_the_snapshot_in_chunks() -> None:
    c = Cluster(chunk_bytes=7)
    c.elect()
    c.propose(5, "a")
    c.nodes["n3"] = None  # n3 stops
    c.propose(10, "b")
    c.checkpoint("n1")
    c.compact("n1", c.node("n1").applied_index)
    assert c.node("n1").log.first_index() > 7
    chunks: list[SnapshotChunk] = []
    c.start("n3")
    # The next heartbeat rounds find n3 behind; its log ends below the leader's first entry.
    c.heartbeats(
        3, keep=lambda m: chunks.append(m) is None if isinstance(m, SnapshotChunk) else True
    )
    snapshot_bytes = len(b"|".join(c.applied["n1"][:16]))
    assert len(chunks) >= snapshot_bytes // 7
    assert all(len(m.data) <= 7 for m in chunks)
    assert c.installs["n3"] == 1
    assert c.applied["n3"] == c.applied["n1"]
    assert c.node("n3").log.snapshot_index == c.node("n1").log.snapshot_index
    assert c.node("n3").commit_index == c.node("n1").commit_index
    # Replication continues from the snapshot: the next entries arrive as appends.
    c.propose(2, "later")
    c.heartbeats(1)  # carries the last commit index
    assert c.applied["n3"] == c.applied["n1"]
    assert c.installs["n3"] == 1
    progress = c.node("n1")._progress["n3"]
    assert progress.state is ProgressState.REPLICATE and progress.snapshot is None


def test_the_snapshot_ready_installs_before_it_acknowledges() -> None:
    c = Cluster(chunk_bytes=1 << 20)
    c.elect()
    c.propose(4)
    c.checkpoint("n1")
    c.compact("n1", c.node("n1").applied_index)
    follower = c.node("n1")
    chunk = follower._leader_snapshot()
    n3 = Cluster().node("n3")  # an empty node of the same cluster
    message = SnapshotChunk(
        "n1",
        "n3",
        c.node("n1").term,
        chunk.index,
        chunk.term,
        VOTERS,
        len(chunk.data),
        chunk.checksum,
        0,
        chunk.data,
    )
    n3.step(message)
    ready = n3.ready()
    assert ready.snapshot is not None and ready.snapshot.index == chunk.index
    assert ready.must_persist and ready.committed == ()
    assert ready.messages == (AppendResponse("n3", "n1", c.node("n1").term, True, chunk.index),)
    with pytest.raises(RaftInvariantError, match="storage reports snapshot"):
        n3.advance(ready)  # the driver did not install it: refused, not believed


def test_chunks_out_of_order_and_a_bad_checksum_install_nothing() -> None:
    c = Cluster()
    n3 = c.node("n3")
    data = b"0123456789abcdef"
    good = snapshot_checksum(data)

    def chunk(offset: int, part: bytes, checksum: str = good) -> SnapshotChunk:
        return SnapshotChunk("n1", "n3", 1, 9, 1, VOTERS, len(data), checksum, offset, part)

    n3.step(chunk(0, data[:8]))
    n3.step(chunk(12, data[12:]))  # a gap: answered with the offset it needs
    ready = n3.ready()
    n3.advance(ready)
    assert SnapshotResponse("n3", "n1", 1, 9, 8) in ready.messages
    assert ready.messages[-1] == SnapshotResponse("n3", "n1", 1, 9, 8)
    assert ready.snapshot is None
    bad = "0" * 64
    n3.step(chunk(0, data[:8], bad))
    n3.step(chunk(8, data[8:], bad))  # complete, but the bytes do not hash to the checksum
    ready = n3.ready()
    n3.advance(ready)
    assert ready.snapshot is None and ready.messages[-1] == SnapshotResponse("n3", "n1", 1, 9, 0)
    assert n3.log.snapshot_index == 0 and c.storage["n3"].installs == 0


def test_a_crash_mid_transfer_keeps_the_old_log_and_the_transfer_starts_over() -> None:
    c = Cluster(chunk_bytes=5)
    c.elect()
    c.propose(3, "a")
    c.nodes["n3"] = None
    c.propose(8, "b")
    c.checkpoint("n1")
    c.compact("n1", c.node("n1").applied_index)
    c.start("n3")
    before = c.storage["n3"].last_index()
    seen = 0

    def crash_after_two_chunks(message: Message) -> bool:
        nonlocal seen
        if isinstance(message, SnapshotChunk) and message.to == "n3":
            seen += 1
            if seen == 3:
                c.nodes["n3"] = None  # crash: the chunks it held in memory are gone
                return False
        return True

    c.heartbeats(3, keep=crash_after_two_chunks)
    assert c.storage["n3"].last_index() == before and c.storage["n3"].installs == 0
    c.start("n3")
    c.outbox.clear()
    c.heartbeats(3)  # heartbeat rounds: the leader resends, n3 asks for offset 0 again
    assert c.installs["n3"] == 1 and c.applied["n3"] == c.applied["n1"]


def test_a_follower_that_holds_the_snapshot_entry_only_commits() -> None:
    c = Cluster()
    c.elect()
    c.propose(3)
    leader = c.node("n1")
    index = leader.applied_index
    term = leader.log.term_at(index)
    n2 = c.node("n2")
    n2.log.commit = 1  # as if it had not yet heard the commit index
    n2.step(SnapshotChunk("n1", "n2", leader.term, index, term, VOTERS, 3, "0" * 64, 0, b"abc"))
    ready = n2.ready()
    n2.advance(ready)
    assert ready.snapshot is None and n2.commit_index == index
    assert ready.messages == (AppendResponse("n2", "n1", leader.term, True, index),)


def test_compaction_boundaries() -> None:
    c = Cluster()
    c.elect()
    c.propose(4)
    leader = c.node("n1")
    with pytest.raises(RaftInvariantError, match="beyond the durable checkpoint"):
        leader.compact(2)  # nothing checkpointed yet
    c.checkpoint("n1")
    applied = leader.applied_index
    with pytest.raises(RaftInvariantError, match="outside"):
        leader.log.compact(applied + 1)
    c.compact("n1", applied - 1)
    with pytest.raises(RaftInvariantError, match="outside"):
        leader.log.compact(applied - 1)  # not above the last compaction point
    with pytest.raises(RaftInvariantError, match="compacted up to"):
        leader.log.entries(applied - 1, applied + 1, entries_max=9, bytes_max=1 << 20)
    assert leader.log.term_at(applied - 1) is not None and leader.log.term_at(applied - 2) is None
    assert leader.log.first_index() == applied


def test_the_policy_compacts_past_the_trailing_window() -> None:
    policy = CompactionPolicy(snapshot_entries=10, trailing_entries=5, snapshot_bytes=1000)
    assert policy.compact_to(snapshot_index=0, checkpoint_index=14, log_bytes=0) == 0
    assert policy.compact_to(snapshot_index=0, checkpoint_index=15, log_bytes=0) == 10
    assert policy.compact_to(snapshot_index=10, checkpoint_index=16, log_bytes=999) == 0
    assert policy.compact_to(snapshot_index=10, checkpoint_index=16, log_bytes=1000) == 11
    assert policy.compact_to(snapshot_index=11, checkpoint_index=16, log_bytes=10**6) == 0
    for bad in ({"snapshot_entries": 0}, {"trailing_entries": -1}, {"snapshot_bytes": 0}):
        with pytest.raises(ValueError):
            CompactionPolicy(**bad)  # type: ignore[arg-type]


def test_snapshot_messages_round_trip_and_malformed_ones_are_refused() -> None:
    data = b"x" * 100
    chunk = SnapshotChunk("n1", "n2", 3, 40, 2, VOTERS, 250, snapshot_checksum(data), 100, data)
    assert codec.decode(codec.encode(chunk, DIGEST), DIGEST) == chunk
    response = SnapshotResponse("n2", "n1", 3, 40, 200)
    assert codec.decode(codec.encode(response, DIGEST), DIGEST) == response
    full = SnapshotChunk(
        "n1",
        "n2",
        3,
        40,
        2,
        VOTERS,
        codec.BATCH_PAYLOAD_BYTES_MAX,
        "0" * 64,
        0,
        b"y" * codec.BATCH_PAYLOAD_BYTES_MAX,
    )
    assert len(codec.encode(full, DIGEST)) <= codec.BODY_BYTES_MAX  # a full chunk fits
    refusals = [
        (dict(offset=151), "ends beyond"),
        (dict(checksum="ABC"), "checksum"),
        (dict(snapshot_term=4), "newer than the message"),
        (dict(total_bytes=codec.SNAPSHOT_BYTES_MAX + 1), "exceeds"),
        (dict(voters=()), "voters"),
        (dict(index=0), "index"),
    ]
    import dataclasses

    for change, why in refusals:
        with pytest.raises(CodecError, match=why):
            codec.encode(dataclasses.replace(chunk, **change), DIGEST)
    body = bytearray(codec.encode(chunk, DIGEST))
    with pytest.raises(CodecError):
        codec.decode(bytes(body[:-1]), DIGEST)  # truncated
    at_limit = dataclasses.replace(chunk, total_bytes=codec.SNAPSHOT_BYTES_MAX)
    assert codec.decode(codec.encode(at_limit, DIGEST), DIGEST) == at_limit


def test_the_append_route_carries_snapshot_chunks_behind_the_cluster_bearer() -> None:
    from falcon import testing

    from appliance.config.credentials import Secret
    from appliance.raft.transport import create_raft_app

    delivered: list[object] = []
    app = create_raft_app(
        node_id="n2",
        digest=DIGEST,
        deliver=delivered.append,
        status=lambda: {},
        credentials={"cluster": Secret("cluster-token-0123456789")},
    )
    client = testing.TestClient(app)
    data = b"z" * codec.BATCH_PAYLOAD_BYTES_MAX  # the largest chunk: 12 MiB, under the body cap
    chunk = SnapshotChunk("n1", "n2", 3, 40, 2, VOTERS, len(data), snapshot_checksum(data), 0, data)
    body = codec.encode(chunk, DIGEST)
    refused = client.simulate_post("/raft/v1/append", body=body)
    assert refused.status_code == 401 and delivered == []
    headers = {"Authorization": "Bearer cluster-token-0123456789"}
    accepted = client.simulate_post("/raft/v1/append", headers=headers, body=body)
    assert accepted.status_code == 202 and delivered == [chunk]
    answer = codec.encode(SnapshotResponse("n1", "n2", 3, 40, 7), DIGEST)
    assert client.simulate_post("/raft/v1/append", headers=headers, body=answer).status_code == 202
    wrong = client.simulate_post("/raft/v1/vote", headers=headers, body=answer)
    assert wrong.status_code == 400  # snapshot messages travel on the append route only


def test_an_append_that_stops_short_of_the_commit_index_does_not_count_as_telling_it() -> None:
    """Seed 102703 (all faults, compaction): a resent older batch carried the commit index but
    ended below it, the leader took the commit as told, and a recovering follower never got the
    append that ends its catch-up."""
    c = Cluster(batch_entries_max=1)
    c.elect()
    c.propose(3)
    leader = c.node("n1")
    progress = leader._progress["n3"]
    progress.commit_sent = 0
    progress.match = 1
    progress.become_probe()  # as after a rejection: resend from index 2, one entry per batch
    leader._send_one_append("n3")
    assert progress.commit_sent == 0  # entry 2 only: short of the commit index 4
    progress.match, progress.next = 3, 4
    progress.probe_sent = False
    leader._send_one_append("n3")
    assert progress.commit_sent == leader.commit_index == 4
