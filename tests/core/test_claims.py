"""The one claim-eligibility rule (appliance/core/claims.py) and the owner's planning from it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from appliance.core.claims import ClaimBlock, claim_block, claimable
from appliance.core.definition import OverlapPolicy
from appliance.core.limits import Limits
from tests.core.test_state import MINUTE, T0, new_state, observe, running

Q, SKIP, CONCURRENT = OverlapPolicy.QUEUE, OverlapPolicy.SKIP, OverlapPolicy.CONCURRENT


def block(**changes: object) -> ClaimBlock | None:
    args: dict[str, object] = {
        "retry_waiting": False,
        "running": 0,
        "running_max": 2,
        "overlap": Q,
        "first_in_line": True,
    }
    args.update(changes)
    return claim_block(**args)  # type: ignore[arg-type]


def test_the_running_limit_admits_one_below_it_and_blocks_at_it() -> None:
    assert block(running=1, running_max=2) is None
    assert block(running=2, running_max=2) is ClaimBlock.RUNNING_LIMIT


@pytest.mark.parametrize("overlap", [Q, SKIP])
def test_a_non_concurrent_record_must_be_first_in_line(overlap: OverlapPolicy) -> None:
    assert block(overlap=overlap, first_in_line=False) is ClaimBlock.OVERLAP
    assert block(overlap=overlap, first_in_line=True) is None


def test_concurrent_ignores_the_line_but_not_the_limit() -> None:
    assert block(overlap=CONCURRENT, first_in_line=False) is None
    assert block(overlap=CONCURRENT, first_in_line=False, running=2) is ClaimBlock.RUNNING_LIMIT


def test_retry_waiting_is_told_first() -> None:
    assert block(retry_waiting=True, running=2, first_in_line=False) is ClaimBlock.RETRY_WAITING


def test_planning_a_queue_claims_only_its_head_and_nothing_while_it_runs() -> None:
    state = new_state(overlap="Queue")
    observe(state, T0 + MINUTE, T0 + 2 * MINUTE)
    assert [oid for oid, _ in claimable(state)] == [1]
    running(state, 1)
    assert claimable(state) == []


def test_planning_concurrent_claims_up_to_the_running_limit() -> None:
    limits = replace(Limits(), running=2)
    state = new_state(limits=limits, overlap="Concurrent", missed={"CatchUp": {"cap": 3}})
    observe(state, T0 + MINUTE, T0 + 2 * MINUTE, T0 + 3 * MINUTE)
    assert len(state.pending_ids(1)) == 3
    assert [oid for oid, _ in claimable(state)] == [1, 2]
