"""A log file that cannot fill the disk: the quickstart's ``runner.log`` and ``worker.log``.

When the next write would take the file past ``max_bytes``, the file is renamed to
``<name>.1`` (which replaces the older one) and a new file is started. A log and its one
predecessor so hold at most twice ``max_bytes`` plus one write. A write is never split across
the two files, and one larger than ``max_bytes`` goes whole into a file of its own.

A string that UTF-8 cannot encode (a script's lone surrogate in an output line) is written with
that code point escaped (``\\udc80``), not dropped and not raised to the writer.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import TracebackType
from typing import BinaryIO


class RotatingLogFile:
    """An append-only text stream (``write``/``flush``/``close``), safe to share across threads."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, not {max_bytes}")
        self.path = path
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._file: BinaryIO = open(path, "ab")  # noqa: SIM115 - held for the log's life
        self._size = os.fstat(self._file.fileno()).st_size  # a resumed log counts what it has
        self.rotations = 0

    @property
    def previous(self) -> Path:
        return self.path.with_name(self.path.name + ".1")

    def write(self, text: str) -> int:
        data = text.encode("utf-8", "backslashreplace")
        with self._lock:
            if self._file.closed:
                raise ValueError(f"{self.path} is closed")
            if self._size > 0 and self._size + len(data) > self.max_bytes:
                self._rotate()
            self._file.write(data)
            self._size += len(data)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def _rotate(self) -> None:
        self._file.close()
        try:
            os.replace(self.path, self.previous)
        except OSError:
            pass  # the log goes on in the same file, past its bound; the next write tries again
        else:
            self.rotations += 1
        self._file = open(self.path, "ab")  # noqa: SIM115 - held for the log's life
        self._size = os.fstat(self._file.fileno()).st_size

    def __enter__(self) -> RotatingLogFile:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
