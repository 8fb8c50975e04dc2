"""The change feed (appliance/metrics/feed.py) over the real loop, machine and single-voter Raft:
every committed change appears once, in log order, with the Raft index as its cursor; waiting is
bounded; a cursor older than what is kept is a gap."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from appliance.metrics.feed import WAITERS_MAX, ChangeFeed, matches
from tests.runner.harness import T0, Voter, definition, wait_until

NEVER_SOON = "0 0 1 1 *"


def send(voter: Voter, **command: Any) -> dict[str, Any]:
    return voter.command(json.dumps(command))


def feed_of(voter: Voter) -> ChangeFeed:
    feed = voter.runner.changes
    assert feed is not None
    return feed


def test_schedule_and_occurrence_changes_appear_in_log_order_with_their_index() -> None:
    with Voter() as v:
        feed = feed_of(v)
        start = feed.page(None).cursor
        sid = send(v, action="create", definition=definition("feed-job"))["id"]
        v.advance_to(T0 + 61)
        v.wait_state(1, "Succeeded")
        page = feed.page(start)
        kinds = [(e["kind"], e.get("change") or e.get("state")) for e in page.events]
        assert kinds[0] == ("schedule", "created")
        assert kinds[-1] == ("occurrence", "Succeeded")
        occurrence = [e for e in page.events if e["kind"] == "occurrence"]
        # Created and claimed by one command (ObserveAndClaim): it appears Running.
        assert [e["state"] for e in occurrence] == ["Running", "Succeeded"]
        assert [e["previous"] for e in occurrence] == [None, "Running"]
        indexes = [e["index"] for e in page.events]
        assert indexes == sorted(indexes) and page.cursor >= indexes[-1]
        running = occurrence[0]
        assert running["attempt"] == 1 and running["reason"]
        assert running["schedule_id"] == sid and running["at"].endswith("Z")
        # Asking again from the cursor: nothing new, and the wait is bounded.
        t0 = time.monotonic()
        later = feed.page(page.cursor, wait_ms=200)
        assert later.events == [] and 0.15 <= time.monotonic() - t0 < 5


def test_update_disable_enable_delete_pause_and_resume_are_events() -> None:
    with Voter() as v:
        feed = feed_of(v)
        start = feed.cursor
        sid = send(v, action="create", definition=definition("a", cron=NEVER_SOON))["id"]
        assert send(v, action="update", id=sid, cron="0 0 2 1 *")["ok"] is True
        for action in ("disable", "enable", "delete"):
            assert send(v, action=action, id=sid)["ok"] is True
        assert send(v, action="pause")["ok"] is True
        assert send(v, action="resume")["ok"] is True
        changes = [(e["kind"], e["change"]) for e in feed.page(start).events]
        assert changes == [
            ("schedule", "created"),
            ("schedule", "updated"),
            ("schedule", "disabled"),
            ("schedule", "enabled"),
            ("schedule", "deleted"),
            ("pause", "paused"),
            ("pause", "resumed"),
        ]
        updated = feed.page(start).events[1]
        assert updated["fields"] == ["cron"] and updated["name"] == "a"


def test_a_waiting_page_returns_as_soon_as_a_matching_change_commits() -> None:
    with Voter() as v:
        feed = feed_of(v)
        first = send(v, action="create", definition=definition("one", cron=NEVER_SOON))["id"]
        cursor = feed.cursor
        got: list[Any] = []
        waiter = threading.Thread(
            target=lambda: got.append(feed.page(cursor, 20_000, matches(first + 1, None)))
        )
        waiter.start()
        # A change of another schedule does not end the wait; one of the watched schedule does.
        send(v, action="disable", id=first)
        time.sleep(0.2)
        assert not got
        send(v, action="create", definition=definition("two", cron=NEVER_SOON))
        waiter.join(10)
        assert got and [e["schedule_id"] for e in got[0].events] == [first + 1]


def test_at_most_waiters_max_requests_wait_and_the_next_is_answered_at_once() -> None:
    with Voter() as v:
        feed = feed_of(v)
        cursor = feed.cursor
        threads = [
            threading.Thread(target=feed.page, args=(cursor, 3_000)) for _ in range(WAITERS_MAX)
        ]
        for thread in threads:
            thread.start()
        wait_until(lambda: feed._waiters == WAITERS_MAX, "every waiter waiting")
        t0 = time.monotonic()
        refused = feed.page(cursor, 3_000)
        assert refused.waited is False and time.monotonic() - t0 < 1.0
        for thread in threads:
            thread.join(10)


def test_a_cursor_older_than_what_is_kept_is_a_gap() -> None:
    with Voter() as v:
        small = ChangeFeed(v.machine, events_max=2)
        start = small.cursor
        for name in ("a", "b", "c", "d"):
            send(v, action="create", definition=definition(name, cron=NEVER_SOON))
        page = small.page(start)
        assert page.gap is True and page.first_cursor > start
        assert [e["name"] for e in page.events] == ["c", "d"]
        assert small.page(page.first_cursor).gap is False


def test_an_acquired_ownership_is_one_event_and_seeding_is_none() -> None:
    with Voter() as v:
        feed = feed_of(v)
        owners = [e for e in feed.page(0).events if e["kind"] == "owner"]
        assert len(owners) == 1, owners
        owner = owners[0]
        assert owner["change"] == "acquired" and owner["node"] == v.runner.cfg.node_id
        assert owner["epoch"] == v.runner.epoch and owner["at"].endswith("Z")


def test_an_uncounted_reader_waits_beside_the_listeners_waiters() -> None:
    """The console's one reader (counted=False) waits even when every counted slot is taken."""
    with Voter() as v:
        feed = feed_of(v)
        cursor = feed.cursor
        threads = [
            threading.Thread(target=feed.page, args=(cursor, 3_000)) for _ in range(WAITERS_MAX)
        ]
        for thread in threads:
            thread.start()
        wait_until(lambda: feed._waiters == WAITERS_MAX, "every waiter waiting")
        t0 = time.monotonic()
        page = feed.page(cursor, 300, counted=False)
        assert page.waited is True and 0.25 <= time.monotonic() - t0 < 5
        assert feed._waiters == WAITERS_MAX  # it took none of their slots
        for thread in threads:
            thread.join(10)
