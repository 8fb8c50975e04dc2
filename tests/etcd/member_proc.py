"""A runner-side etcd member as its own process, for SIGSTOP tests: it proposes ``<id>-<n>``
whenever it believes it leads, and prints one JSON line per outcome until SIGTERM."""

from __future__ import annotations

import json
import signal
import sys
import threading

from appliance.replication import NotLeader
from appliance.replication.etcd import EtcdReplication
from tests.etcd.members import settings


def main() -> None:
    node_id, prefix, ttl_s, *endpoints = sys.argv[1:]
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    member = EtcdReplication(
        node_id=node_id, settings=settings(endpoints, prefix, int(ttl_s)), apply=lambda i, c: i
    )
    member.subscribe(lambda lead: say({"leadership": lead.is_leader}))
    member.start()
    n = 0
    while not done.is_set():
        if not member.is_leader():
            done.wait(0.01)
            continue
        n += 1
        command = f"{node_id}-{n}".encode()
        try:
            say({"ok": member.propose(command, timeout_s=5), "command": command.decode()})
        except NotLeader:
            say({"refused": command.decode()})
        except TimeoutError:
            say({"unknown": command.decode()})
    member.stop()


_SAY_LOCK = threading.Lock()


def say(event: dict[str, object]) -> None:
    # One write per line, under a lock: the leadership callback's thread prints too, and
    # print() writes the text and its newline separately, so two threads could interleave.
    with _SAY_LOCK:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
