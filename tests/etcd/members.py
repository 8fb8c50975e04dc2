"""Runner-side helpers for the etcd tests: a deterministic apply hook and three members."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

from appliance.replication.etcd import EtcdReplication, EtcdSettings
from tests import support

WAIT_S = 15.0
_prefixes = itertools.count(1)


class StateMachine:
    """Deterministic apply hook: records commands, returns (index, position)."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []
        self.lock = threading.Lock()

    def __call__(self, index: int, command: bytes) -> tuple[int, int]:
        with self.lock:
            self.applied.append((index, command))
            return index, len(self.applied)


def wait_for(predicate: Callable[[], object], what: str, timeout_s: float = WAIT_S) -> None:
    support.wait_for(predicate, what, timeout_s)


def fresh_prefix() -> str:
    return f"/test/{time.monotonic_ns()}-{next(_prefixes)}"


def settings(endpoints: list[str], prefix: str, ttl_s: int = 2) -> EtcdSettings:
    return EtcdSettings(
        endpoints=tuple(endpoints),
        prefix=prefix,
        lease_ttl_seconds=ttl_s,
        request_timeout_ms=1_000,
        observe_interval_ms=100,
        watch_idle_timeout_s=2.0,
    )


class Trio:
    """Three runner-side members sharing one prefix."""

    def __init__(self, endpoints: list[str], ttl_s: int = 2, prefix: str | None = None) -> None:
        self.prefix = prefix or fresh_prefix()
        self.ids = ["r1", "r2", "r3"]
        self.machines = {i: StateMachine() for i in self.ids}
        self.members = {
            i: EtcdReplication(
                node_id=i, settings=settings(endpoints, self.prefix, ttl_s), apply=self.machines[i]
            )
            for i in self.ids
        }

    def start(self) -> Trio:
        for member in self.members.values():
            member.start()
        return self

    def stop(self) -> None:
        for member in self.members.values():
            member.stop()

    def leader(self, exclude: tuple[str, ...] = ()) -> EtcdReplication:
        found: list[EtcdReplication] = []

        def one() -> bool:
            found[:] = [m for i, m in self.members.items() if i not in exclude and m.is_leader()]
            return len(found) == 1

        wait_for(one, "one leader")
        return found[0]
