"""When a Ready's messages may leave before its entries are durable (thesis §10.2.1).

The usual rule is "persist, then send". One exception lets the followers' fsyncs overlap the
leader's own: a leader's Ready whose messages are all its own appends and heartbeats of its
current term, with no hard-state change, no truncation and no recovery step to persist. Such
messages acknowledge nothing: their term is already durable, their commit index was computed from
durable copies only, and the leader counts its own copy towards a commit only from ``advance`` on,
once the entries are durable. The production driver and the simulator share this one rule, so
every simulated seed exercises the order production uses.
"""

from __future__ import annotations

from appliance.raft.messages import AppendRequest, Heartbeat
from appliance.raft.node import Ready, Role


def may_send_before_persist(ready: Ready) -> bool:
    """All or nothing, so the messages of one Ready keep their order."""
    if not ready.messages or not ready.entries:
        return False  # no entries to persist: nothing to overlap, keep the usual order
    if ready.persist_hard_state or ready.truncate_from is not None or ready.recovered:
        return False
    if ready.snapshot is not None:
        return False
    if ready.soft_state.role is not Role.LEADER:
        return False
    term = ready.hard_state.term
    return all(
        isinstance(message, AppendRequest | Heartbeat) and message.term == term
        for message in ready.messages
    )
