"""CPU seconds used by a set of processes and their children over a window (Linux ``/proc``).

On a shared 2-core machine the wall-clock figures of a burst vary from run to run by more than
most changes move them; the CPU the processes spent on the same work varies far less. A thread
samples every ``interval_s`` so that children that come and go (engine children are replaced)
are counted: a process first seen after ``start`` counts from zero.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system CPU seconds) of ``pid``, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def _children(parents: set[int]) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None and stat[0] in parents:
                found.append(int(entry))
    return found


class CpuSampler:
    """``roles`` maps a pid to its label; children of a pid count under ``<label> children``."""

    def __init__(self, roles: dict[int, str], interval_s: float = 0.25) -> None:
        self._roles = dict(roles)
        self._interval_s = interval_s
        self._base: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _label(self, pid: int) -> str:
        return self._roles.get(pid, "")

    def _sample(self) -> None:
        for pid in list(self._roles) + _children(set(self._roles_of_parents())):
            stat = _stat(pid)
            if stat is None:
                continue
            if pid not in self._roles:
                self._roles[pid] = f"{self._roles.get(stat[0], '?')} children"
            self._base.setdefault(pid, 0.0 if self._thread.is_alive() else stat[1])
            self._last[pid] = stat[1]

    def _roles_of_parents(self) -> list[int]:
        return [pid for pid, label in self._roles.items() if not label.endswith(" children")]

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def start(self) -> None:
        self._sample()  # the processes alive now count from what they already used
        self._thread.start()

    def stop(self) -> dict[str, float]:
        """CPU seconds per label since ``start``."""
        self._stop.set()
        self._thread.join()
        self._sample()
        used: Counter[str] = Counter()
        for pid, last in self._last.items():
            used[self._roles[pid]] += last - self._base[pid]
        return {label: round(seconds, 2) for label, seconds in sorted(used.items())}
