"""A fake network: latency, loss, duplication, reordering and directed partitions.

It only decides *when* (or whether) a message arrives; the simulation's event queue delivers it.
A partition is a set of blocked directed links, so a one-way cut (a hears b, b does not hear a)
and a two-way isolation are the same mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from appliance.sim.faults import FaultSettings

LATENCY_MS_MIN = 1
LATENCY_MS_MAX = 20
REORDER_DELAY_MS_MAX = 400


class RandomSource(Protocol):
    def random(self) -> float: ...

    def randint(self, a: int, b: int) -> int: ...


@dataclass
class FakeNetwork:
    faults: FaultSettings
    rng: RandomSource
    blocked: set[tuple[str, str]] = field(default_factory=set)  # (sender, recipient)
    sent: int = 0
    dropped: int = 0
    duplicated: int = 0

    def delivery_delays_ms(self, sender: str, to: str) -> list[int]:
        """Delays after which copies of a message arrive (empty: it is lost)."""
        self.sent += 1
        if (sender, to) in self.blocked or self.rng.random() < self.faults.loss_rate:
            self.dropped += 1
            return []
        copies = 1
        if self.rng.random() < self.faults.dup_rate:
            copies = 2
            self.duplicated += 1
        delays = []
        for _ in range(copies):
            if self.rng.random() < self.faults.reorder_rate:
                delays.append(self.rng.randint(LATENCY_MS_MAX, REORDER_DELAY_MS_MAX))
            else:
                delays.append(self.rng.randint(LATENCY_MS_MIN, LATENCY_MS_MAX))
        return delays

    def heal(self) -> None:
        self.blocked.clear()

    def isolate(self, node: str, others: list[str], *, one_way: bool = False) -> None:
        for other in others:
            self.blocked.add((other, node))
            if not one_way:
                self.blocked.add((node, other))

    def split(self, group_a: list[str], group_b: list[str]) -> None:
        for a in group_a:
            for b in group_b:
                self.blocked.add((a, b))
                self.blocked.add((b, a))
