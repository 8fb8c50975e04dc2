"""The durable list of engine child pids, so that a restarted worker can kill leftovers.

Theory of operation: engine children arm a parent-death signal and normally die with the worker,
but that is a kernel courtesy, not a proof. Every pid is recorded (written to a temporary file,
fsynced, renamed over ``engine-children.json`` in the data_dir, directory fsynced) BEFORE the
child can receive work; at start-up the previous list is handed to
``appliance.engine.kill_recorded_children`` (which only signals processes that still carry the
engine marker, so a recycled pid is left alone) and then replaced. The list is bounded: pids the
engine has reaped are dropped at each write.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

FILE_NAME: Final = "engine-children.json"
PIDS_MAX: Final = 4096


class ChildPidFile:
    def __init__(self, data_dir: str | Path, live_pids: Callable[[], Iterable[int] | None]) -> None:
        """``live_pids()``: the engine's unreaped children, or None while it is not known yet
        (the engine's spawner may report a child before its constructor has returned)."""
        self.path = Path(data_dir) / FILE_NAME
        self._live_pids = live_pids
        self._recorded: set[int] = set()
        self._lock = threading.Lock()

    def read(self) -> list[int]:
        """The recorded pids (an unreadable or damaged file yields none: the death signal and
        the engine marker check remain)."""
        try:
            value = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        if not isinstance(value, dict) or not isinstance(value.get("pids"), list):
            return []
        return [p for p in value["pids"] if isinstance(p, int) and not isinstance(p, bool)]

    def record(self, pid: int) -> None:
        """Durably add ``pid`` (called before the child can run anything)."""
        with self._lock:
            self._recorded.add(pid)
            live = self._live_pids()
            if live is not None:  # drop the reaped ones: the file stays bounded
                self._recorded &= {*live, pid}
            self._write(sorted(self._recorded)[-PIDS_MAX:])

    def replace(self, pids: Iterable[int]) -> None:
        with self._lock:
            self._recorded = set(pids)
            self._write(sorted(self._recorded)[-PIDS_MAX:])

    def _write(self, pids: list[int]) -> None:
        staging = self.path.with_name(self.path.name + ".tmp")
        data = json.dumps({"pids": pids}).encode("ascii")
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(staging, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY | os.O_CLOEXEC)
        try:
            with contextlib.suppress(OSError):
                os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
