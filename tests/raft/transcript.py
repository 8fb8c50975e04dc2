"""A tiny transcript runner for Raft scenarios (in the spirit of etcd-io/raft's testdata).

A script is a sequence of blocks::

    command arg arg
    ----
    expected output lines

Commands drive real ``RaftNode`` cores over an in-memory network that delivers messages in FIFO
order, persisting every Ready before its messages leave (the production rule). Set
``RAFT_REWRITE=1`` to regenerate the expected output after reviewing a change.

    cluster n1 n2 n3 [batch=N] [election=MIN..MAX]   create voters (seeded randomness per id)
    set-log n1 TERM T1 T2 ...    give n1 a stored log with those entry terms and hard-state TERM
    campaign n1                  tick n1 until it leaves the follower role
    tick n1 [K]                  K ticks of n1 alone (default 1), no delivery
    elapse K                     K times: every live node ticks once, then stabilize quietly
    propose n1 DATA [COUNT]      propose DATA (COUNT copies, suffixed -1, -2 ...)
    read n1 ID                   start a ReadIndex barrier with request id ID
    round                        every node hands over its Ready; queued messages delivered once
    stabilize [quiet]            rounds until nothing moves (quiet: do not print messages)
    partition n1 | n2 n3         drop messages between the groups (both ways)
    cut n1 n2                    drop messages from n1 to n2 only
    heal                         remove every partition and cut
    crash n1 / restart n1        lose in-memory state / rebuild from storage
    lose-disk n1                 n1 loses its whole store; restarts on a recovering one
    status                       one line per node
    log n1                       n1's log as index/term:kind
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from appliance.raft import (
    AppendRequest,
    AppendResponse,
    Entry,
    EntryKind,
    Heartbeat,
    HeartbeatResponse,
    MemoryLogStorage,
    Message,
    NotLeader,
    ProposalRefused,
    RaftConfig,
    RaftNode,
    SoftState,
    VoteRequest,
    VoteResponse,
)


def describe(m: Message) -> str:
    head = f"{m.sender}->{m.to} t{m.term}"
    if isinstance(m, VoteRequest):
        kind = "PreVote" if m.pre_vote else "Vote"
        return f"{head} {kind} last={m.last_log_index}/{m.last_log_term}"
    if isinstance(m, VoteResponse):
        kind = "PreVoteResp" if m.pre_vote else "VoteResp"
        return f"{head} {kind} {'granted' if m.granted else 'rejected'}"
    if isinstance(m, AppendRequest):
        span = f" {m.entries[0].index}..{m.entries[-1].index}" if m.entries else ""
        return (
            f"{head} Append prev={m.prev_index}/{m.prev_term} commit={m.commit} "
            f"entries={len(m.entries)}{span}"
        )
    if isinstance(m, AppendResponse):
        if m.success:
            return f"{head} AppendResp ok index={m.index}"
        return f"{head} AppendResp reject index={m.index} hint={m.hint_index}/{m.hint_term}"
    if isinstance(m, Heartbeat):
        return f"{head} Heartbeat commit={m.commit} read_seq={m.read_seq}"
    if isinstance(m, HeartbeatResponse):
        return f"{head} HeartbeatResp read_seq={m.read_seq}"
    raise TypeError(m)


class Cluster:
    def __init__(self, ids: list[str], *, batch: int, election: tuple[int, int]):
        self.ids = ids
        self.batch = batch
        self.election = election
        self.storage = {i: MemoryLogStorage() for i in ids}
        self.nodes: dict[str, RaftNode | None] = {}
        self.applied: dict[str, list[Entry]] = {i: [] for i in ids}
        self.queue: list[Message] = []
        self.blocked: set[tuple[str, str]] = set()
        self.incarnation = dict.fromkeys(ids, 0)
        self.soft: dict[str, SoftState] = {}
        for node_id in ids:
            self.start(node_id)

    def start(self, node_id: str) -> None:
        self.incarnation[node_id] += 1
        config = RaftConfig(
            node_id=node_id,
            voters=tuple(self.ids),
            election_ticks_min=self.election[0],
            election_ticks_max=self.election[1],
            batch_entries_max=self.batch,
        )
        rng = random.Random(f"{node_id}/{self.incarnation[node_id]}")
        self.nodes[node_id] = RaftNode(config, self.storage[node_id], rng)
        self.applied[node_id] = []
        node = self.nodes[node_id]
        self.soft[node_id] = SoftState(node.role, node.term, node.leader_id)

    def node(self, node_id: str) -> RaftNode:
        node = self.nodes[node_id]
        if node is None:
            raise ValueError(f"{node_id} is down")
        return node

    def handle_ready(self, out: list[str]) -> bool:
        moved = False
        for node_id in self.ids:
            node = self.nodes[node_id]
            while node is not None and node.has_ready():
                moved = True
                ready = node.ready()
                if ready.must_persist:
                    self.storage[node_id].persist(
                        term=ready.hard_state.term,
                        voted_for=ready.hard_state.voted_for,
                        truncate_from=ready.truncate_from,
                        entries=ready.stored_entries(),
                    )
                if ready.recovered:
                    self.storage[node_id].clear_recovering()
                    out.append(f"{node_id} caught up: a full voter again")
                self.queue.extend(ready.messages)
                self.applied[node_id].extend(ready.committed)
                for read in ready.reads:
                    out.append(f"{node_id} read {read.request_id} released at index {read.index}")
                for request_id in ready.reads_failed:
                    out.append(f"{node_id} read {request_id} failed")
                soft = ready.soft_state
                if soft != self.soft.get(node_id):
                    out.append(
                        f"{node_id} becomes {soft.role.value} t{soft.term} "
                        f"leader={soft.leader_id or '-'}"
                    )
                    self.soft[node_id] = soft
                node.advance(ready)
        return moved

    def round(self, out: list[str], *, quiet: bool) -> bool:
        moved = self.handle_ready(out)
        batch, self.queue = self.queue, []
        for message in batch:
            target = self.nodes.get(message.to)
            if (message.sender, message.to) in self.blocked or target is None:
                if not quiet:
                    out.append(f"dropped {describe(message)}")
                continue
            if not quiet:
                out.append(describe(message))
            target.step(message)
            moved = True
        return moved

    def status_line(self, node_id: str) -> str:
        node = self.nodes[node_id]
        if node is None:
            return f"{node_id} down"
        return (
            f"{node_id} {node.role.value} term={node.term} vote={node.voted_for or '-'} "
            f"leader={node.leader_id or '-'} commit={node.commit_index} "
            f"applied={node.applied_index} last={node.last_index}"
            + (" RECOVERING" if node.recovering else "")
        )


def run_command(cluster: Cluster | None, line: str) -> tuple[Cluster | None, list[str]]:
    words = line.split()
    cmd, args = words[0], words[1:]
    out: list[str] = []
    if cmd == "cluster":
        ids = [a for a in args if "=" not in a]
        opts = dict(a.split("=", 1) for a in args if "=" in a)
        low, high = opts.get("election", "10..20").split("..")
        cluster = Cluster(ids, batch=int(opts.get("batch", "32")), election=(int(low), int(high)))
        out.extend(cluster.status_line(i) for i in ids)
        return cluster, out
    if cluster is None:
        raise ValueError("first command must be 'cluster'")
    if cmd == "set-log":
        node_id, term, terms = args[0], int(args[1]), [int(t) for t in args[2:]]
        storage = MemoryLogStorage()
        storage.persist(
            term=term,
            voted_for=None,
            entries=[
                (i + 1, t, Entry(i + 1, t, EntryKind.NORMAL, f"{node_id}-{i + 1}".encode()).payload)
                for i, t in enumerate(terms)
            ],
        )
        cluster.storage[node_id] = storage
        cluster.start(node_id)
        out.append(cluster.status_line(node_id))
    elif cmd == "campaign":
        node = cluster.node(args[0])
        for _ in range(node.config.election_ticks_max + 1):
            node.tick()
            if node.role.value != "follower":
                break
        cluster.handle_ready(out)
    elif cmd == "tick":
        node = cluster.node(args[0])
        for _ in range(int(args[1]) if len(args) > 1 else 1):
            node.tick()
            cluster.handle_ready(out)
    elif cmd == "elapse":
        for _ in range(int(args[0])):
            for node in cluster.nodes.values():
                if node is not None:
                    node.tick()
            while cluster.round(out, quiet=True):
                pass
    elif cmd == "propose":
        node = cluster.node(args[0])
        count = int(args[2]) if len(args) > 2 else 1
        for n in range(count):
            data = args[1] if count == 1 else f"{args[1]}-{n + 1}"
            try:
                term, index = node.propose(data.encode())
                if count == 1:
                    out.append(f"{args[0]} accepted {data!r} at index {index} term {term}")
            except (NotLeader, ProposalRefused) as exc:
                out.append(f"{args[0]} refused: {exc}")
        if count > 1:
            out.append(f"{args[0]} accepted {count} proposals, last index {node.last_index}")
    elif cmd == "read":
        try:
            cluster.node(args[0]).read_index(int(args[1]))
            out.append(f"{args[0]} read {args[1]} started")
        except NotLeader as exc:
            out.append(f"{args[0]} refused: {exc}")
    elif cmd == "round":
        cluster.round(out, quiet=False)
    elif cmd == "stabilize":
        quiet = "quiet" in args
        rounds = 0
        while cluster.round(out, quiet=quiet):
            rounds += 1
            if rounds > 1000:
                raise RuntimeError("stabilize did not settle in 1000 rounds")
    elif cmd == "partition":
        bar = args.index("|")
        left, right = args[:bar], args[bar + 1 :]
        for a in left:
            for b in right:
                cluster.blocked |= {(a, b), (b, a)}
    elif cmd == "cut":
        cluster.blocked.add((args[0], args[1]))
    elif cmd == "heal":
        cluster.blocked.clear()
    elif cmd == "crash":
        cluster.nodes[args[0]] = None
    elif cmd == "lose-disk":
        cluster.storage[args[0]] = MemoryLogStorage(recovering=True)
        cluster.start(args[0])
        out.append(cluster.status_line(args[0]))
    elif cmd == "restart":
        cluster.start(args[0])
        out.append(cluster.status_line(args[0]))
    elif cmd == "status":
        out.extend(cluster.status_line(i) for i in cluster.ids)
    elif cmd == "log":
        node = cluster.node(args[0])
        entries = node.log.entries(1, node.last_index + 1, entries_max=10**6, bytes_max=2**40)
        kinds = {EntryKind.BARRIER: "noop", EntryKind.NORMAL: "cmd"}
        out.append(" ".join(f"{e.index}/{e.term}:{kinds[e.kind]}" for e in entries) or "(empty)")
    else:
        raise ValueError(f"unknown command {cmd!r}")
    return cluster, out


def parse_script(text: str) -> list[tuple[list[str], str, list[str]]]:
    """Blocks of (leading comment lines, command, expected output lines)."""
    blocks = []
    lines = text.splitlines()
    i = 0
    comments: list[str] = []
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            comments.append(line)
            i += 1
            continue
        command = line
        if i + 1 >= len(lines) or lines[i + 1] != "----":
            raise ValueError(f"line {i + 2}: expected '----' after command {command!r}")
        i += 2
        expected = []
        while i < len(lines) and lines[i].strip():
            expected.append(lines[i])
            i += 1
        blocks.append((comments, command, expected))
        comments = []
    return blocks


def run_script(path: Path) -> tuple[str, str]:
    """(the file as written, the file as the code now produces it)."""
    text = path.read_text(encoding="utf-8")
    cluster = None
    produced = []
    for comments, command, _expected in parse_script(text):
        cluster, out = run_command(cluster, command)
        produced.extend(c for c in comments if c.strip())
        produced += [command, "----", *(out or ["ok"]), ""]
    actual = "\n".join(produced)
    if os.environ.get("RAFT_REWRITE") == "1":
        path.write_text(actual, encoding="utf-8")
    return _normalize(text), _normalize(actual)


def _normalize(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.strip()) + "\n"
