"""The bytes of a runner snapshot: every checkpoint part, in name order (docs/store.md).

    b"APSNAP1\\n" | part count u32 | per part: name length u16 | name (UTF-8)
                                               | data length u32 | data

The Raft layer checks the SHA-256 of the whole before it hands the bytes over; ``decode_parts``
still refuses anything malformed (truncated, trailing bytes, names out of order or repeated), so
a bug cannot install half a checkpoint.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping

META_SNAPSHOT = "snapshot"  # runner meta row: the last compaction point {"index", "term", "voters"}

MAGIC = b"APSNAP1\n"
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


class SnapshotFormatError(ValueError):
    """The bytes are not a runner snapshot."""


def encode_parts(parts: Mapping[str, bytes]) -> bytes:
    out = [MAGIC, _U32.pack(len(parts))]
    for name in sorted(parts):
        raw = name.encode("utf-8")
        out += [_U16.pack(len(raw)), raw, _U32.pack(len(parts[name])), parts[name]]
    return b"".join(out)


def decode_parts(data: bytes) -> dict[str, bytes]:
    view = memoryview(data)
    if bytes(view[: len(MAGIC)]) != MAGIC:
        raise SnapshotFormatError("not a runner snapshot (bad magic)")
    at = len(MAGIC)

    def take(count: int, what: str) -> bytes:
        nonlocal at
        if at + count > len(view):
            raise SnapshotFormatError(f"snapshot truncated while reading {what}")
        chunk = bytes(view[at : at + count])
        at += count
        return chunk

    (count,) = _U32.unpack(take(4, "part count"))
    parts: dict[str, bytes] = {}
    previous = ""
    for position in range(count):
        (name_len,) = _U16.unpack(take(2, "name length"))
        try:
            name = take(name_len, "name").decode("utf-8")
        except UnicodeDecodeError:
            raise SnapshotFormatError(f"part {position} has a name that is not UTF-8") from None
        if position and name <= previous:
            raise SnapshotFormatError(f"part names out of order or repeated at {name!r}")
        (data_len,) = _U32.unpack(take(4, "data length"))
        parts[name] = take(data_len, f"part {name!r}")
        previous = name
    if at != len(view):
        raise SnapshotFormatError(f"{len(view) - at} trailing bytes after the snapshot")
    return parts


def parse_snapshot_meta(text: str | None) -> tuple[int, int, tuple[str, ...]] | None:
    """(index, term, voters) from the ``snapshot`` metadata value; None if absent; raises
    ValueError when it is not what ``compact`` writes."""
    if text is None:
        return None
    value = json.loads(text)
    if not isinstance(value, dict) or set(value) != {"index", "term", "voters"}:
        raise ValueError(f"snapshot metadata is not {{index, term, voters}}: {text[:80]!r}")
    index, term, voters = value["index"], value["term"], value["voters"]
    if not (isinstance(index, int) and index >= 1 and isinstance(term, int) and term >= 0):
        raise ValueError(f"snapshot metadata has a bad index or term: {text[:80]!r}")
    if not isinstance(voters, list) or not all(isinstance(v, str) for v in voters):
        raise ValueError(f"snapshot metadata has bad voters: {text[:80]!r}")
    return index, term, tuple(voters)
