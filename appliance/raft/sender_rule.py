"""Who may speak to this node: the cluster listener's rule for a Raft message's sender (pure).

Theory of operation (issue 36, finding 5; Raft thesis §4.1). The transport has already checked
the cluster bearer and, under TLS, that the message's ``sender`` is the node id its client
certificate names. This rule then asks whether the sender is a *member* — a voter or a learner —
of the configuration in force on this node (the latest in its log, committed or not). A member
may send anything. A node that is not a member may send only what Raft needs from a server this
node may not know yet: this node can lag behind the CONFIG entry that added the sender, and the
thesis (§4.1) has a server accept AppendEntries from a leader outside its latest configuration
("otherwise, a new server could never be added to the cluster") and grant votes to such a
candidate ("this vote may occasionally be needed to keep the cluster available"). So a leader's
append, heartbeat or snapshot chunk, or a vote request (pre-vote included), is taken at this
node's current term or a later one; everything else — answers, ``TimeoutNow``, a stale term — is
refused, naming the sender. A joining node lists itself as a learner of the genesis voters, so
the genesis leader that adds it is a member in its eyes from the start; a leader added at run
time is heard through the exception until the log tells the node about it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from appliance.raft.messages import AppendRequest, Heartbeat, Message, SnapshotChunk, VoteRequest

# What a server outside this node's configuration may still send (thesis §4.1).
FROM_A_NEWER_CONFIGURATION: Final = (AppendRequest, Heartbeat, SnapshotChunk, VoteRequest)


def sender_refusal(message: Message, members: Collection[str], term: int) -> str | None:
    """Why ``message`` is refused (None: take it). ``members``: voters and learners of the
    configuration in force here; ``term``: this node's current term."""
    sender = message.sender
    if sender in members:
        return None
    if isinstance(message, FROM_A_NEWER_CONFIGURATION) and message.term >= term:
        return None
    return (
        f"{sender!r} is not a voter or learner of this node's configuration "
        f"({', '.join(sorted(members))}); a {type(message).__name__} at term {message.term} "
        f"(this node is at term {term}) is taken only from a member"
    )
