"""Core limits shared by every replica (SPEC §3 "Limits")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    schedules: int = 64
    records: int = 4096
    outstanding: int = 128
    running: int = 16
    grace_seconds: int = 5


CHECKPOINT_BYTES_MAX = 4 * 1024 * 1024
