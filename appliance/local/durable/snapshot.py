"""The V1 file snapshot codec (byte format: docs/local/snapshot-v1.md).

Theory of operation: the snapshot is a bounded, checksummed, line-oriented document. Saving
streams every record through one fixed 64 KiB buffer into an exclusive temporary file while the
SHA-256 is updated incrementally, so no full in-memory copy of the file exists; the temporary file
is fsynced, atomically renamed over the old snapshot and the directory is fsynced. Loading reads
through a reader capped at ``SNAPSHOT_BYTES_MAX``, verifies the checksum before parsing anything,
then validates each record and its order against the previous record only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Iterable
from pathlib import Path

from ..config import MAX_DURABLE_TASKS
from ..errors import SnapshotCorrupt, SnapshotTooLarge
from .records import DurableTaskRecord, record_from_json, record_to_json

MAGIC = b"APPLIANCE-LOCAL-SNAPSHOT-V1\n"
TRAILER_PREFIX = b"sha256:"
TRAILER_BYTES = len(TRAILER_PREFIX) + 64 + 1
SNAPSHOT_BYTES_MAX = 4 * 1024 * 1024
WRITE_BUFFER_BYTES = 64 * 1024
HEADER_FIELDS = frozenset({"epoch", "records"})
EPOCH_MAX = 2**63 - 1


def encode_json(doc: object) -> bytes:
    """Canonical JSON: sorted keys, no whitespace, ASCII only (so bytes order = text order)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


class HashingBufferedWriter:
    """Writes through one fixed buffer into ``fd``, hashing every byte and enforcing a bound."""

    def __init__(self, fd: int, bytes_max: int):
        self._fd = fd
        self._bytes_max = bytes_max
        self._buffer = bytearray(WRITE_BUFFER_BYTES)
        self._used = 0
        self._total = 0
        self._hash = hashlib.sha256()

    def write(self, data: bytes, *, hashed: bool = True) -> None:
        if self._total + len(data) > self._bytes_max:
            raise SnapshotTooLarge(f"snapshot would exceed {self._bytes_max} bytes")
        self._total += len(data)
        if hashed:
            self._hash.update(data)
        view = memoryview(data)
        while view:
            room = WRITE_BUFFER_BYTES - self._used
            chunk = view[:room]
            self._buffer[self._used : self._used + len(chunk)] = chunk
            self._used += len(chunk)
            view = view[len(chunk) :]
            if self._used == WRITE_BUFFER_BYTES:
                self.flush()

    def flush(self) -> None:
        view = memoryview(self._buffer)[: self._used]
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._used = 0

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def write_snapshot(
    path: Path, epoch: int, records: Iterable[DurableTaskRecord], count: int
) -> None:
    """Atomically replace ``path`` with a V1 snapshot of ``records`` (ascending task keys)."""
    if not 0 <= count <= MAX_DURABLE_TASKS:
        raise SnapshotTooLarge(f"snapshot of {count} records; at most {MAX_DURABLE_TASKS}")
    directory = path.parent
    temp = directory / f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        writer = HashingBufferedWriter(fd, SNAPSHOT_BYTES_MAX)
        writer.write(MAGIC)
        writer.write(encode_json({"epoch": epoch, "records": count}) + b"\n")
        previous_key: str | None = None
        written = 0
        for record in records:
            if previous_key is not None and record.task_key <= previous_key:
                raise ValueError("snapshot records must be written in ascending task order")
            previous_key = record.task_key
            writer.write(encode_json(record_to_json(record)) + b"\n")
            written += 1
        if written != count:
            raise ValueError(f"snapshot announced {count} records, wrote {written}")
        writer.write(TRAILER_PREFIX + writer.hexdigest().encode() + b"\n", hashed=False)
        writer.flush()
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        temp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(temp, path)
    _fsync_directory(directory)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_snapshot(path: Path) -> tuple[int, dict[str, DurableTaskRecord]]:
    """Load and fully validate a V1 snapshot; any defect raises ``SnapshotCorrupt``."""
    with open(path, "rb") as f:
        data = f.read(SNAPSHOT_BYTES_MAX + 1)
    if len(data) > SNAPSHOT_BYTES_MAX:
        raise SnapshotTooLarge(f"{path}: larger than {SNAPSHOT_BYTES_MAX} bytes; refused")
    return decode_snapshot(data, str(path))


def decode_snapshot(data: bytes, where: str) -> tuple[int, dict[str, DurableTaskRecord]]:
    if len(data) < len(MAGIC) + TRAILER_BYTES or not data.startswith(MAGIC):
        raise SnapshotCorrupt(f"{where}: not a V1 snapshot (bad magic or truncated)")
    body_end = len(data) - TRAILER_BYTES
    trailer = data[body_end:]
    if not trailer.startswith(TRAILER_PREFIX) or not trailer.endswith(b"\n"):
        raise SnapshotCorrupt(f"{where}: missing sha256 trailer (truncated?)")
    stored = trailer[len(TRAILER_PREFIX) : -1]
    computed = hashlib.sha256(memoryview(data)[:body_end]).hexdigest().encode()
    if not hmac.compare_digest(stored, computed):
        raise SnapshotCorrupt(
            f"{where}: checksum mismatch (stored {stored.decode('ascii', 'replace')}, "
            f"computed {computed.decode()}); the snapshot is corrupt and was not loaded"
        )
    position = len(MAGIC)
    header_line, position = _next_line(data, position, body_end, where)
    header = _parse(header_line, where, "header")
    if type(header) is not dict or header.keys() != HEADER_FIELDS:
        raise SnapshotCorrupt(f"{where}: header fields must be exactly {sorted(HEADER_FIELDS)}")
    epoch, count = header["epoch"], header["records"]
    if type(epoch) is not int or not 0 <= epoch <= EPOCH_MAX:
        raise SnapshotCorrupt(f"{where}: header epoch must be an integer in 0..2^63-1")
    if type(count) is not int or not 0 <= count <= MAX_DURABLE_TASKS:
        raise SnapshotCorrupt(f"{where}: header records must be an integer in 0..1024")
    records: dict[str, DurableTaskRecord] = {}
    previous_key: str | None = None
    while position < body_end:
        line, position = _next_line(data, position, body_end, where)
        index = len(records)
        record = record_from_json(
            _parse(line, where, f"record {index}"), f"{where}: record {index}"
        )
        if previous_key is not None and record.task_key <= previous_key:
            raise SnapshotCorrupt(
                f"{where}: record {index} task {record.task_key!r} is not after {previous_key!r}"
            )
        previous_key = record.task_key
        records[record.task_key] = record
    if len(records) != count:
        raise SnapshotCorrupt(f"{where}: header announces {count} records, found {len(records)}")
    return epoch, records


def _next_line(data: bytes, start: int, end: int, where: str) -> tuple[bytes, int]:
    newline = data.find(b"\n", start, end)
    if newline < 0:
        raise SnapshotCorrupt(f"{where}: unterminated line at byte {start}")
    return data[start:newline], newline + 1


def _parse(line: bytes, where: str, what: str) -> object:
    try:
        doc = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SnapshotCorrupt(f"{where}: {what} is not JSON ({exc})") from None
    # Exact bytes: only the canonical encoding is accepted, so a snapshot round-trips unchanged.
    if encode_json(doc) != line:
        raise SnapshotCorrupt(f"{where}: {what} is not canonical JSON")
    return doc
