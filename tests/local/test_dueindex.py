"""The due index hands free slots to the best due tasks without scanning every due task."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from appliance.local.dueindex import DueIndex


@dataclass(eq=False)
class Item:
    task_id: int
    priority: int
    due_us: int
    version: int = 0


def index_of(items):
    index = DueIndex()
    for item in items:
        index.push(item)
    return index


def test_order_is_priority_then_earlier_deadline_then_registration():
    items = [Item(1, 0, 50), Item(2, 5, 90), Item(3, 5, 10), Item(4, 0, 50), Item(5, -1, 0)]
    taken = index_of(items).take_due(now_us=100, slots=5)
    assert [i.task_id for i in taken] == [3, 2, 1, 4, 5]


def test_only_due_tasks_are_taken_and_only_as_many_as_free_slots():
    index = index_of([Item(i, 0, i * 10) for i in range(1, 11)])
    assert index.take_due(now_us=5, slots=3) == []
    assert [i.task_id for i in index.take_due(now_us=100, slots=3)] == [1, 2, 3]
    assert index.take_due(now_us=100, slots=0) == []
    assert index.has_due(now_us=100)
    assert index.next_due_us() == 40


def test_a_due_high_priority_task_beats_an_older_low_priority_one():
    index = index_of([Item(1, 0, 0), Item(2, 9, 50)])
    assert [i.task_id for i in index.take_due(now_us=50, slots=1)] == [2]
    assert [i.task_id for i in index.take_due(now_us=50, slots=1)] == [1]


def test_65536_due_tasks_retain_at_most_128_candidates():
    rng = random.Random(7)
    items = [Item(i, rng.randint(-3, 3), rng.randint(0, 1000)) for i in range(1, 65_537)]
    index = index_of(items)
    taken = index.take_due(now_us=1000, slots=128)
    assert index.stats.retained_peak == 128
    expected = sorted(items, key=lambda t: (-t.priority, t.due_us, t.task_id))[:128]
    assert [i.task_id for i in taken] == [t.task_id for t in expected]
    assert index.has_due(now_us=1000)  # the other 65,408 stay indexed, untouched


def test_stale_items_are_skipped_after_a_version_bump():
    first, second = Item(1, 0, 0), Item(2, 0, 5)
    index = index_of([first, second])
    first.version += 1  # cancelled or rescheduled elsewhere
    assert index.take_due(now_us=10, slots=2) == [second]
    assert index.next_due_us() is None
    assert not index.has_due(now_us=10)


def test_a_rescheduled_item_is_found_at_its_new_deadline():
    item = Item(1, 0, 0)
    index = index_of([item])
    item.version += 1
    item.due_us = 500
    index.push(item)
    assert index.next_due_us() == 500
    assert index.take_due(now_us=499, slots=1) == []
    assert index.take_due(now_us=500, slots=1) == [item]


@pytest.mark.parametrize("seed", range(20))
def test_index_agrees_with_a_brute_force_model(seed):
    rng = random.Random(seed)
    index = DueIndex()
    live: dict[int, Item] = {}
    next_id = 1
    now_us = 0
    for _ in range(400):
        action = rng.random()
        if action < 0.45:
            item = Item(next_id, rng.randint(-2, 2), now_us + rng.randint(-50, 200))
            next_id += 1
            live[item.task_id] = item
            index.push(item)
        elif action < 0.6 and live:
            item = live[rng.choice(sorted(live))]
            item.version += 1  # rescheduled
            item.due_us = now_us + rng.randint(0, 100)
            index.push(item)
        elif action < 0.7 and live:
            item = live.pop(rng.choice(sorted(live)))
            item.version += 1  # cancelled
        else:
            now_us += rng.randint(0, 60)
            slots = rng.randint(0, 5)
            due = [i for i in live.values() if i.due_us <= now_us]
            expected = sorted(due, key=lambda i: (-i.priority, i.due_us, i.task_id))[:slots]
            taken = index.take_due(now_us, slots)
            assert [i.task_id for i in taken] == [i.task_id for i in expected]
            for item in taken:
                item.version += 1  # dispatched
                del live[item.task_id]
            assert index.has_due(now_us) == any(i.due_us <= now_us for i in live.values())
            assert index.next_due_us() == min((i.due_us for i in live.values()), default=None)
