"""Snapshots of the runner checkpoint kept in etcd, and the compaction of the log under them.

Keys (docs/etcd.md, "Snapshots and compaction"):

- ``<prefix>/snapshot/<20-digit index>/<6-digit chunk>``: the checkpoint at that applied index,
  encoded by ``snapshot_format`` and cut into chunks of ``CHUNK_BYTES`` (each put is one request,
  well inside etcd's default 1.5 MiB request cap once base64 has grown it by 4/3);
- ``<prefix>/snapshot``: the metadata (canonical JSON) that makes one snapshot visible — its
  index, term (the writing tenure's leader ``create_revision``), the first log index kept, the
  contract digest, the total size, the chunk count and the SHA-256 of the whole.

The writer puts every chunk first (each put guarded by its tenure, so a deposed owner writes
nothing) and then, in ONE txn guarded by its tenure and by the metadata key being exactly what it
read, puts the metadata, deletes the log keys below the first kept index and deletes every other
snapshot's chunks. So the log keys a runner would miss disappear in the same revision in which a
snapshot covering them becomes visible; chunks of a failed attempt are left until the next.

A reader takes the metadata, then each chunk, and checks count, sizes and SHA-256; a chunk gone
meanwhile (a newer snapshot replaced it) is ``SnapshotMoved``: read the metadata again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from appliance.replication.etcd_gateway import (
    Compare,
    EtcdError,
    EtcdGateway,
    EtcdUnavailable,
    b64,
    prefix_end,
    put_op,
    range_op,
)

CHUNK_BYTES = 512 * 1024  # base64: about 700 KB per put, under the 1.5 MiB request cap
META_FORMAT = 1
_META_KEYS = {
    "format",
    "index",
    "term",
    "first_index",
    "contract_digest",
    "bytes",
    "chunks",
    "sha256",
}


class SnapshotInvalid(Exception):
    """What etcd holds under the snapshot keys is not a well-formed, intact snapshot."""


class SnapshotMoved(Exception):
    """A chunk vanished or changed while it was read: a newer snapshot replaced it."""


@dataclass(frozen=True)
class SnapshotMeta:
    index: int
    term: int
    first_index: int  # the lowest log key kept; every key below it is deleted
    contract_digest: str
    size_bytes: int
    chunks: int
    sha256: str

    def encode(self) -> bytes:
        value = {
            "format": META_FORMAT,
            "index": self.index,
            "term": self.term,
            "first_index": self.first_index,
            "contract_digest": self.contract_digest,
            "bytes": self.size_bytes,
            "chunks": self.chunks,
            "sha256": self.sha256,
        }
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class EtcdSnapshot:
    """What a store installs (``RunnerStore.install_snapshot`` reads these four fields)."""

    index: int
    term: int
    data: bytes
    voters: tuple[str, ...] = ()  # the etcd backend has no voter set


def decode_meta(raw: bytes) -> SnapshotMeta:
    try:
        value = json.loads(raw)
    except ValueError:
        raise SnapshotInvalid("snapshot metadata is not JSON") from None
    if not isinstance(value, dict) or set(value) != _META_KEYS:
        raise SnapshotInvalid(f"snapshot metadata has other fields: {raw[:120]!r}")
    if value["format"] != META_FORMAT:
        raise SnapshotInvalid(f"snapshot metadata format {value['format']!r} is unknown")
    ints = ("index", "term", "first_index", "bytes", "chunks")
    if not all(type(value[k]) is int and value[k] >= 0 for k in ints):
        raise SnapshotInvalid(f"snapshot metadata has a bad number: {raw[:120]!r}")
    if not (1 <= value["first_index"] <= value["index"]):
        raise SnapshotInvalid(f"snapshot first_index is not in 1..index: {raw[:120]!r}")
    if value["chunks"] != -(-value["bytes"] // CHUNK_BYTES):
        raise SnapshotInvalid(f"snapshot chunk count does not fit its size: {raw[:120]!r}")
    if not isinstance(value["sha256"], str) or not isinstance(value["contract_digest"], str):
        raise SnapshotInvalid(f"snapshot metadata has a bad digest: {raw[:120]!r}")
    return SnapshotMeta(
        index=value["index"],
        term=value["term"],
        first_index=value["first_index"],
        contract_digest=value["contract_digest"],
        size_bytes=value["bytes"],
        chunks=value["chunks"],
        sha256=value["sha256"],
    )


class SnapshotKeys:
    def __init__(self, prefix: bytes) -> None:
        self.meta = prefix + b"/snapshot"
        self.chunks = prefix + b"/snapshot/"
        self.log = prefix + b"/log/"

    def chunk_dir(self, index: int) -> bytes:
        return self.chunks + str(index).zfill(20).encode() + b"/"

    def chunk(self, index: int, number: int) -> bytes:
        return self.chunk_dir(index) + str(number).zfill(6).encode()

    def log_key(self, index: int) -> bytes:
        return self.log + str(index).zfill(20).encode()


def read_meta(gateway: EtcdGateway, keys: SnapshotKeys) -> tuple[SnapshotMeta | None, int]:
    """(metadata or None, the meta key's mod_revision, 0 when absent); linearizable."""
    _, kvs = gateway.range(keys.meta)
    if not kvs:
        return None, 0
    return decode_meta(kvs[0].value), kvs[0].mod_revision


def read_snapshot(gateway: EtcdGateway, keys: SnapshotKeys, meta: SnapshotMeta) -> EtcdSnapshot:
    """The snapshot ``meta`` describes, every chunk checked; SnapshotMoved when it was replaced."""
    pieces: list[bytes] = []
    for number in range(meta.chunks):
        _, kvs = gateway.range(keys.chunk(meta.index, number))
        if not kvs:
            raise SnapshotMoved(f"snapshot {meta.index} chunk {number} is gone")
        pieces.append(kvs[0].value)
    data = b"".join(pieces)
    if len(data) != meta.size_bytes or hashlib.sha256(data).hexdigest() != meta.sha256:
        raise SnapshotMoved(f"snapshot {meta.index} does not match its size and SHA-256")
    return EtcdSnapshot(index=meta.index, term=meta.term, data=data)


def write_snapshot(
    gateway: EtcdGateway,
    keys: SnapshotKeys,
    *,
    leader_key: bytes,
    tenure_revision: int,
    meta_revision: int,
    meta: SnapshotMeta,
    data: bytes,
) -> int | None:
    """Put the chunks, then publish ``meta`` and delete the log below ``meta.first_index`` in one
    guarded txn. The txn's revision, or None when the guard failed (no longer the owner, or the
    metadata changed since ``meta_revision``: nothing was published)."""
    tenure = Compare(leader_key, "CREATE", "EQUAL", tenure_revision)
    for number in range(meta.chunks):
        piece = data[number * CHUNK_BYTES : (number + 1) * CHUNK_BYTES]
        # A resend of an ambiguous chunk put is harmless: same key, same bytes.
        result = _txn_retrying(gateway, [tenure], [put_op(keys.chunk(meta.index, number), piece)])
        if not result.succeeded:
            return None
    own_dir = keys.chunk_dir(meta.index)
    success: Sequence[dict[str, Any]] = [
        put_op(keys.meta, meta.encode()),
        _delete(keys.log, keys.log_key(meta.first_index)),
        _delete(keys.chunks, own_dir),
        _delete(prefix_end(own_dir), prefix_end(keys.chunks)),
    ]
    guard = [tenure, Compare(keys.meta, "MOD", "EQUAL", meta_revision)]
    result = gateway.txn(guard, success, [{"request_range": range_op(keys.meta)}])
    return result.revision if result.succeeded else None


def compact_history(gateway: EtcdGateway, revision: int) -> None:
    """Ask etcd to drop the history before ``revision`` (keys stay). Already compacted is fine."""
    try:
        gateway.call("/v3/kv/compaction", {"revision": str(revision)}, idempotent=True)
    except EtcdUnavailable as exc:
        if "compacted" not in str(exc):
            raise


def _txn_retrying(gateway: EtcdGateway, guard: list[Compare], ops: list[dict[str, Any]]) -> Any:
    last: EtcdError | None = None
    for _ in range(3):
        try:
            return gateway.txn(guard, ops)
        except EtcdError as exc:
            last = exc
    assert last is not None
    raise last


def _delete(key: bytes, range_end: bytes) -> dict[str, Any]:
    return {"request_delete_range": {"key": b64(key), "range_end": b64(range_end)}}
