"""Raft messages to and from bytes: a small fixed binary framing (SPEC §5).

Why binary: a full replication batch holds up to 12 MiB of payload and must fit the 16 MiB body
cap; base64 inside JSON would grow it to 16 MiB before any framing. Here a batch costs 20 bytes
per entry plus a header under 300 bytes, so the largest legal batch is about 12 MiB + 1 KiB.

Layout (all integers big-endian, unsigned):

    header   b"RAFT" | version u8 (=2) | kind u8 | digest (u8 len + ASCII)
             | sender (u8 len + ASCII) | to (u8 len + ASCII) | term u64
    1 VoteRequest        last_log_index u64 | last_log_term u64 | pre_vote u8 | transfer u8
    2 VoteResponse       granted u8 | pre_vote u8
    3 AppendRequest      prev_index u64 | prev_term u64 | commit u64 | count u32
                         then per entry: index u64 | term u64 | length u32 | payload
                         (payload = kind byte + data, exactly what the store keeps)
    4 AppendResponse     success u8 | index u64 | hint_index u64 | hint_term u64
    5 Heartbeat          commit u64 | read_seq u64
    6 HeartbeatResponse  read_seq u64
    7 SnapshotChunk      index u64 | snapshot_term u64 | voter count u8, then each voter
                         (u8 len + ASCII) | total_bytes u64 | checksum (u8 len + 64 hex)
                         | offset u64 | length u32 | data
    8 SnapshotResponse   index u64 | next_offset u64
    9 TimeoutNow         (the header only)

Version 2 (membership change) added VoteRequest's transfer flag, TimeoutNow, and learners in a
snapshot's voter list (``learner:`` + node id, membership.py); a version-1 voter refuses its
messages, so a cluster upgrades all voters together.

A snapshot chunk carries at most 12 MiB of data (the batch cap), of a snapshot of at most
``SNAPSHOT_BYTES_MAX`` (64 MiB: the checkpoint it is made of is capped at 4 MiB), and must end
within it; its snapshot term is at most the message term.

Every message carries the sender's contract digest; ``decode`` refuses a different one with
``DigestMismatch`` (the transport logs it loudly). Anything else malformed — truncated, trailing
bytes, unknown kind, a bool that is not 0/1, a bad node id, entries that are not contiguous after
prev_index or newer than the message term, more than 32 entries or 12 MiB of payload, a body over
16 MiB — raises ``CodecError`` and yields nothing.
"""

from __future__ import annotations

import struct

from appliance.raft.errors import CodecError, DigestMismatch, RaftInvariantError
from appliance.raft.membership import ADDRESS_CHARS_MAX, LEARNER_PREFIX
from appliance.raft.messages import (
    AppendRequest,
    AppendResponse,
    Entry,
    Heartbeat,
    HeartbeatResponse,
    Message,
    SnapshotChunk,
    SnapshotResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from appliance.raft.validation import NODE_ID_PATTERN

MiB = 1024 * 1024
BODY_BYTES_MAX = 16 * MiB
BATCH_ENTRIES_MAX = 32
BATCH_PAYLOAD_BYTES_MAX = 12 * MiB
DIGEST_BYTES_MAX = 128
SNAPSHOT_BYTES_MAX = 64 * MiB
VOTERS_MAX = 64
MAGIC = b"RAFT"
VERSION = 2

_KIND_OF = {
    VoteRequest: 1,
    VoteResponse: 2,
    AppendRequest: 3,
    AppendResponse: 4,
    Heartbeat: 5,
    HeartbeatResponse: 6,
    SnapshotChunk: 7,
    SnapshotResponse: 8,
    TimeoutNow: 9,
}
_HEX = frozenset("0123456789abcdef")
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_ENTRY_HEAD = struct.Struct(">QQI")
_U64_MAX = 2**64 - 1


def _text(value: str, what: str) -> bytes:
    raw = value.encode("ascii", errors="strict") if value.isascii() else b""
    if not raw or len(raw) > 255:
        raise CodecError(f"{what} must be 1-255 ASCII characters, got {value!r}")
    return bytes((len(raw),)) + raw


def _u64(value: int, what: str) -> bytes:
    if not 0 <= value <= _U64_MAX:
        raise CodecError(f"{what} out of range: {value}")
    return _U64.pack(value)


_HEADERS: dict[tuple[int, str, str, str], bytes] = {}
_HEADERS_MAX = 1024  # (kind, digest, sender, to) prefixes kept: a voter talks to a few peers


def _header(kind: int, digest: str, sender: str, to: str) -> bytes:
    """MAGIC, version, kind, digest, sender and recipient: the same bytes for every message of
    one kind between two nodes, so they are built (and checked) once."""
    key = (kind, digest, sender, to)
    header = _HEADERS.get(key)
    if header is None:
        header = b"".join(
            (
                MAGIC,
                bytes((VERSION, kind)),
                _text(digest, "digest"),
                _text(sender, "sender"),
                _text(to, "to"),
            )
        )
        if len(_HEADERS) >= _HEADERS_MAX:
            _HEADERS.clear()
        _HEADERS[key] = header
    return header


class _LastBlock:
    """The entries most recently encoded, with their bytes, as ONE tuple (read and replaced in
    one step, so two threads encoding at once never pair one's entries with the other's bytes):
    a leader sends the same new entries to every follower, so the second append reuses the first
    one's block. A hit needs the very same ``Entry`` objects (immutable), so the bytes are theirs.
    """

    last: tuple[tuple[Entry, ...], bytes] = ((), b"")


def _entries_block(entries: tuple[Entry, ...]) -> bytes:
    cached_entries, cached_block = _LastBlock.last
    if (
        entries
        and len(entries) == len(cached_entries)
        and all(a is b for a, b in zip(entries, cached_entries, strict=True))
    ):
        return cached_block
    payload_bytes = sum(e.payload_bytes for e in entries)
    if payload_bytes > BATCH_PAYLOAD_BYTES_MAX:
        raise CodecError(f"batch payload {payload_bytes} exceeds {BATCH_PAYLOAD_BYTES_MAX}")
    parts = []
    for entry in entries:
        payload = entry.payload
        parts += [_ENTRY_HEAD.pack(entry.index, entry.term, len(payload)), payload]
    block = b"".join(parts)
    if entries:
        _LastBlock.last = (entries, block)
    return block


def encode(message: Message, digest: str) -> bytes:
    """Bytes for ``message``, stamped with our contract ``digest``."""
    kind = _KIND_OF.get(type(message))
    if kind is None:
        raise CodecError(f"cannot encode {type(message).__name__}")
    if len(digest) > DIGEST_BYTES_MAX:
        raise CodecError(f"digest longer than {DIGEST_BYTES_MAX} characters")
    parts = [_header(kind, digest, message.sender, message.to), _u64(message.term, "term")]
    if isinstance(message, VoteRequest):
        parts += [
            _u64(message.last_log_index, "last_log_index"),
            _u64(message.last_log_term, "last_log_term"),
            bytes((message.pre_vote, message.transfer)),
        ]
    elif isinstance(message, VoteResponse):
        parts.append(bytes((message.granted, message.pre_vote)))
    elif isinstance(message, AppendRequest):
        entries = message.entries
        if len(entries) > BATCH_ENTRIES_MAX:
            raise CodecError(f"batch of {len(entries)} entries exceeds {BATCH_ENTRIES_MAX}")
        parts += [
            _u64(message.prev_index, "prev_index"),
            _u64(message.prev_term, "prev_term"),
            _u64(message.commit, "commit"),
            _U32.pack(len(entries)),
            _entries_block(entries),
        ]
    elif isinstance(message, AppendResponse):
        parts += [
            bytes((message.success,)),
            _u64(message.index, "index"),
            _u64(message.hint_index, "hint_index"),
            _u64(message.hint_term, "hint_term"),
        ]
    elif isinstance(message, Heartbeat):
        parts += [_u64(message.commit, "commit"), _u64(message.read_seq, "read_seq")]
    elif isinstance(message, SnapshotChunk):
        _check_chunk(message)
        parts += [
            _u64(message.index, "index"),
            _u64(message.snapshot_term, "snapshot_term"),
            bytes((len(message.voters),)),
            *(_text(v, "voter") for v in message.voters),
            _u64(message.total_bytes, "total_bytes"),
            _text(message.checksum, "checksum"),
            _u64(message.offset, "offset"),
            _U32.pack(len(message.data)),
            message.data,
        ]
    elif isinstance(message, SnapshotResponse):
        parts += [_u64(message.index, "index"), _u64(message.next_offset, "next_offset")]
    elif isinstance(message, HeartbeatResponse):
        parts.append(_u64(message.read_seq, "read_seq"))
    body = b"".join(parts)
    if len(body) > BODY_BYTES_MAX:
        raise CodecError(f"encoded message of {len(body)} bytes exceeds {BODY_BYTES_MAX}")
    return body


class _Reader:
    """Reads fields off the bytes in order; every read checks the bounds first."""

    __slots__ = ("_at", "_data", "_end")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0
        self._end = len(data)

    def take(self, count: int, what: str) -> bytes:
        at = self._at
        end = at + count
        if end > self._end:
            raise CodecError(f"message truncated while reading {what}")
        self._at = end
        return self._data[at:end]

    def u8(self, what: str) -> int:
        at = self._at
        if at >= self._end:
            raise CodecError(f"message truncated while reading {what}")
        self._at = at + 1
        return self._data[at]

    def u32(self, what: str) -> int:
        at = self._at
        if at + 4 > self._end:
            raise CodecError(f"message truncated while reading {what}")
        self._at = at + 4
        return int(_U32.unpack_from(self._data, at)[0])

    def u64(self, what: str) -> int:
        at = self._at
        if at + 8 > self._end:
            raise CodecError(f"message truncated while reading {what}")
        self._at = at + 8
        return int(_U64.unpack_from(self._data, at)[0])

    def entry_head(self) -> tuple[int, int, int]:
        at = self._at
        if at + _ENTRY_HEAD.size > self._end:
            raise CodecError("message truncated while reading entry")
        self._at = at + _ENTRY_HEAD.size
        index, term, length = _ENTRY_HEAD.unpack_from(self._data, at)
        return int(index), int(term), int(length)

    def flag(self, what: str) -> bool:
        value = self.u8(what)
        if value > 1:
            raise CodecError(f"{what} must be 0 or 1, got {value}")
        return value == 1

    def text(self, what: str) -> str:
        raw = self.take(self.u8(f"{what} length"), what)
        try:
            return raw.decode("ascii")
        except UnicodeDecodeError:
            raise CodecError(f"{what} is not ASCII") from None

    def node_id(self, what: str) -> str:
        value = self.text(what)
        if NODE_ID_PATTERN.fullmatch(value) is None:
            raise CodecError(f"{what} is not a valid node id: {value!r}")
        return value

    def finish(self) -> None:
        if self._at != self._end:
            raise CodecError(f"{self._end - self._at} trailing bytes after the message")


def decode(data: bytes, expected_digest: str) -> Message:
    """The message in ``data``; refuses other digests, malformed and oversized input."""
    if len(data) > BODY_BYTES_MAX:
        raise CodecError(f"body of {len(data)} bytes exceeds {BODY_BYTES_MAX}")
    reader = _Reader(data if type(data) is bytes else bytes(data))
    if reader.take(4, "magic") != MAGIC:
        raise CodecError("not a Raft message (bad magic)")
    version = reader.u8("version")
    if version != VERSION:
        raise CodecError(f"unsupported Raft wire version {version}")
    kind = reader.u8("kind")
    digest = reader.text("digest")
    sender = reader.node_id("sender")
    to = reader.node_id("to")
    if digest != expected_digest:
        raise DigestMismatch(sender, digest, expected_digest)
    term = reader.u64("term")
    message: Message
    if kind == 1:
        message = VoteRequest(
            sender,
            to,
            term,
            reader.u64("last_log_index"),
            reader.u64("last_log_term"),
            reader.flag("pre_vote"),
            reader.flag("transfer"),
        )
    elif kind == 2:
        message = VoteResponse(sender, to, term, reader.flag("granted"), reader.flag("pre_vote"))
    elif kind == 3:
        message = _decode_append(reader, sender, to, term)
    elif kind == 4:
        message = AppendResponse(
            sender,
            to,
            term,
            reader.flag("success"),
            reader.u64("index"),
            reader.u64("hint_index"),
            reader.u64("hint_term"),
        )
    elif kind == 5:
        message = Heartbeat(sender, to, term, reader.u64("commit"), reader.u64("read_seq"))
    elif kind == 6:
        message = HeartbeatResponse(sender, to, term, reader.u64("read_seq"))
    elif kind == 7:
        message = _decode_chunk(reader, sender, to, term)
    elif kind == 8:
        message = SnapshotResponse(sender, to, term, reader.u64("index"), reader.u64("next_offset"))
    elif kind == 9:
        message = TimeoutNow(sender, to, term)
    else:
        raise CodecError(f"unknown message kind {kind}")
    reader.finish()
    return message


def _decode_append(reader: _Reader, sender: str, to: str, term: int) -> AppendRequest:
    prev_index = reader.u64("prev_index")
    prev_term = reader.u64("prev_term")
    commit = reader.u64("commit")
    count = reader.u32("entry count")
    if count > BATCH_ENTRIES_MAX:
        raise CodecError(f"batch of {count} entries exceeds {BATCH_ENTRIES_MAX}")
    entries = []
    payload_bytes = 0
    for position in range(count):
        index, entry_term, length = reader.entry_head()
        payload_bytes += length
        if payload_bytes > BATCH_PAYLOAD_BYTES_MAX:
            raise CodecError(f"batch payload exceeds {BATCH_PAYLOAD_BYTES_MAX} bytes")
        if index != prev_index + 1 + position:
            raise CodecError(f"entry {index} is not contiguous after prev_index {prev_index}")
        if entry_term > term or entry_term < prev_term:
            raise CodecError(f"entry {index} has term {entry_term} outside [{prev_term}, {term}]")
        payload = reader.take(length, "entry payload")
        try:
            entries.append(Entry.from_stored(index, entry_term, payload))
        except RaftInvariantError as exc:
            raise CodecError(str(exc)) from None
    return AppendRequest(sender, to, term, prev_index, prev_term, tuple(entries), commit)


def _check_chunk(m: SnapshotChunk) -> None:
    if not 1 <= len(m.voters) <= VOTERS_MAX:
        raise CodecError(f"snapshot names {len(m.voters)} voters, expected 1-{VOTERS_MAX}")
    for member in m.voters:
        voter, _, address = member.removeprefix(LEARNER_PREFIX).partition("@")
        if NODE_ID_PATTERN.fullmatch(voter) is None or len(address) > ADDRESS_CHARS_MAX:
            raise CodecError(f"snapshot voter is not a valid node id: {voter!r}")
    if len(m.checksum) != 64 or not set(m.checksum) <= _HEX:
        raise CodecError("snapshot checksum must be 64 lowercase hex characters")
    if m.snapshot_term > m.term:
        raise CodecError(f"snapshot term {m.snapshot_term} is newer than the message {m.term}")
    if m.index < 1:
        raise CodecError("snapshot index must be >= 1")
    if m.total_bytes > SNAPSHOT_BYTES_MAX:
        raise CodecError(f"snapshot of {m.total_bytes} bytes exceeds {SNAPSHOT_BYTES_MAX}")
    if len(m.data) > BATCH_PAYLOAD_BYTES_MAX:
        raise CodecError(f"snapshot chunk of {len(m.data)} bytes exceeds {BATCH_PAYLOAD_BYTES_MAX}")
    if m.offset + len(m.data) > m.total_bytes:
        raise CodecError(
            f"snapshot chunk at {m.offset} of {len(m.data)} bytes ends beyond {m.total_bytes}"
        )


def _decode_chunk(reader: _Reader, sender: str, to: str, term: int) -> SnapshotChunk:
    index = reader.u64("index")
    snapshot_term = reader.u64("snapshot_term")
    count = reader.u8("voter count")
    voters = tuple(reader.text("voter") for _ in range(count))  # checked by _check_chunk
    total_bytes = reader.u64("total_bytes")
    checksum = reader.text("checksum")
    offset = reader.u64("offset")
    length = reader.u32("chunk length")
    if length > BATCH_PAYLOAD_BYTES_MAX:
        raise CodecError(f"snapshot chunk of {length} bytes exceeds {BATCH_PAYLOAD_BYTES_MAX}")
    data = reader.take(length, "snapshot data")
    message = SnapshotChunk(
        sender, to, term, index, snapshot_term, voters, total_bytes, checksum, offset, data
    )
    _check_chunk(message)
    return message
