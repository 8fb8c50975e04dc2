"""Fault settings for one simulated run: which faults are on and how hard they hit.

A handful of knobs, not thirty (STYLE, on TigerBeetle's VOPR). Each seed draws its own intensity
within the enabled classes, so a long run covers calm and hostile networks alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

FAULT_CLASSES = ("loss", "dup", "reorder", "partition", "crash", "clock", "disk")


class RandomSource(Protocol):
    def random(self) -> float: ...

    def choice(self, seq): ...  # type: ignore[no-untyped-def]


@dataclass(frozen=True)
class FaultSettings:
    loss_rate: float = 0.0  # probability a message is dropped
    dup_rate: float = 0.0  # probability a message is delivered twice
    reorder_rate: float = 0.0  # probability a message is delayed far beyond the usual latency
    partitions: bool = False  # one-way cuts, isolations and splits come and go
    crash_rate: float = 0.0  # per fault event: probability of crashing a running node
    crash_in_ready_rate: float = 0.0  # per ready(): crash before persisting (the batch is lost)
    clock_faults: bool = False  # tick jitter, clock jumps forward, stalls
    # per fault event: probability that one voter loses its whole durable state while another
    # voter is down; it restarts later from a recovering store (docs/voter-recovery.md)
    disk_loss_rate: float = 0.0

    @classmethod
    def draw(cls, enabled: frozenset[str], rng: RandomSource) -> FaultSettings:
        unknown = enabled - set(FAULT_CLASSES)
        if unknown:
            raise ValueError(f"unknown fault classes {sorted(unknown)}; known: {FAULT_CLASSES}")
        return cls(
            loss_rate=rng.choice((0.0, 0.01, 0.05, 0.2)) if "loss" in enabled else 0.0,
            dup_rate=rng.choice((0.0, 0.02, 0.1)) if "dup" in enabled else 0.0,
            reorder_rate=rng.choice((0.0, 0.05, 0.2)) if "reorder" in enabled else 0.0,
            partitions="partition" in enabled,
            crash_rate=rng.choice((0.1, 0.3, 0.6)) if "crash" in enabled else 0.0,
            crash_in_ready_rate=rng.choice((0.0, 0.002, 0.02)) if "crash" in enabled else 0.0,
            clock_faults="clock" in enabled,
            disk_loss_rate=rng.choice((0.05, 0.15, 0.3)) if "disk" in enabled else 0.0,
        )


def parse_fault_classes(text: str) -> frozenset[str]:
    """``all``, ``none`` or a comma list of FAULT_CLASSES."""
    text = text.strip()
    if text == "all":
        return frozenset(FAULT_CLASSES)
    if text in ("", "none"):
        return frozenset()
    classes = frozenset(part.strip() for part in text.split(","))
    unknown = classes - set(FAULT_CLASSES)
    if unknown:
        raise ValueError(f"unknown fault classes {sorted(unknown)}; known: {FAULT_CLASSES}")
    return classes
