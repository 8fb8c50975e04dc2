"""The checkers themselves: each one fires on the evidence it exists to catch."""

from __future__ import annotations

import random

import pytest

from appliance.raft import (
    Entry,
    EntryKind,
    MemoryLogStorage,
    RaftConfig,
    RaftNode,
)
from appliance.sim.checkers import SafetyCheckers, Violation, check_log_matching


def node_with_log(node_id: str, terms: list[int], tag: bytes = b"") -> RaftNode:
    storage = MemoryLogStorage()
    storage.persist(
        term=max(terms, default=0),
        voted_for=None,
        entries=[
            (i + 1, t, Entry(i + 1, t, EntryKind.NORMAL, b"%d/%d" % (i + 1, t) + tag).payload)
            for i, t in enumerate(terms)
        ],
    )
    return RaftNode(RaftConfig(node_id, ("n1", "n2", "n3")), storage, random.Random(0))


def test_two_different_entries_applied_at_one_index_are_a_violation() -> None:
    checkers = SafetyCheckers()
    checkers.on_apply("n1", Entry(1, 1, EntryKind.NORMAL, b"a"))
    with pytest.raises(Violation, match="state-machine safety"):
        checkers.on_apply("n2", Entry(1, 2, EntryKind.NORMAL, b"b"))


def test_applying_out_of_order_is_a_violation() -> None:
    checkers = SafetyCheckers()
    with pytest.raises(Violation, match="apply order"):
        checkers.on_apply("n1", Entry(2, 1, EntryKind.NORMAL, b"a"))


def test_reapplying_the_same_entries_after_a_restart_is_fine() -> None:
    checkers = SafetyCheckers()
    checkers.on_apply("n1", Entry(1, 1, EntryKind.NORMAL, b"a"))
    checkers.node_restarted("n1", 0)
    checkers.on_apply("n1", Entry(1, 1, EntryKind.NORMAL, b"a"))


def test_log_matching_flags_equal_terms_over_different_prefixes() -> None:
    a = node_with_log("n1", [1, 1, 2])
    b = node_with_log("n2", [1, 1, 2])
    check_log_matching([a, b])
    c = node_with_log("n3", [1, 1, 2], tag=b"forged")
    with pytest.raises(Violation, match="log matching"):
        check_log_matching([a, c])


def test_a_new_leader_without_an_applied_entry_breaks_leader_completeness() -> None:
    checkers = SafetyCheckers()
    checkers.on_apply("n2", Entry(1, 1, EntryKind.NORMAL, b"a"))
    leader = node_with_log("n1", [])
    leader.role = leader.role.LEADER  # observed as a leader of term 0 with an empty log
    with pytest.raises(Violation, match="leader completeness"):
        checkers.observe(leader)


def test_two_leaders_in_one_term_break_election_safety() -> None:
    checkers = SafetyCheckers()
    for node_id in ("n1", "n2"):
        node = node_with_log(node_id, [])
        node.role = node.role.LEADER
        if node_id == "n2":
            with pytest.raises(Violation, match="election safety"):
                checkers.observe(node)
        else:
            checkers.observe(node)


def test_a_read_below_an_already_committed_index_is_a_violation() -> None:
    checkers = SafetyCheckers()
    checkers.on_read_released("n1", 5, 5)
    with pytest.raises(Violation, match="linearizable read"):
        checkers.on_read_released("n1", 4, 5)
