"""The V1 file snapshot: exact bytes, checksums, bounds, locks and crash safety."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from appliance.local import FileStateProvider, ProviderLocked, SnapshotCorrupt, SnapshotTooLarge
from appliance.local.durable import snapshot as snapshot_module
from appliance.local.durable.records import Claim, DurableTaskRecord, Receipt
from appliance.local.durable.snapshot import (
    SNAPSHOT_BYTES_MAX,
    WRITE_BUFFER_BYTES,
    HashingBufferedWriter,
    decode_snapshot,
    read_snapshot,
    write_snapshot,
)
from tests.local.conftest import START

DUE = START + timedelta(minutes=1)
REPO = Path(__file__).resolve().parents[2]


def sample_records() -> list[DurableTaskRecord]:
    claim = Claim("alpha", "node-a", 3, DUE, 2, DUE + timedelta(seconds=30))
    receipt = Receipt(START, 1, 2, "failed", START + timedelta(seconds=1))
    return [
        DurableTaskRecord("alpha", "every:60000000us", DUE, 2, 4, claim, (receipt,)),
        DurableTaskRecord("beta", "once:2026-01-01T12:00:00.000000Z", None, 1, 1),
    ]


def test_v1_bytes_match_the_documented_format(tmp_path):
    path = tmp_path / "s.snapshot"
    write_snapshot(path, 3, sample_records(), 2)
    data = path.read_bytes()
    lines = data.split(b"\n")
    assert lines[0] == b"APPLIANCE-LOCAL-SNAPSHOT-V1"
    assert lines[1] == b'{"epoch":3,"records":2}'
    assert json.loads(lines[2])["task"] == "alpha"
    assert lines[3] == (
        b'{"attempt":1,"claim":null,"definition":"once:2026-01-01T12:00:00.000000Z",'
        b'"next_run":null,"receipts":[],"runs_completed":1,"task":"beta"}'
    )
    body = data[: data.rindex(b"sha256:")]
    assert lines[4] == b"sha256:" + hashlib.sha256(body).hexdigest().encode()
    assert lines[5] == b""  # the file ends with a newline


def test_save_then_load_round_trips_exactly(tmp_path):
    path = tmp_path / "s.snapshot"
    records = sample_records()
    write_snapshot(path, 3, records, 2)
    epoch, loaded = read_snapshot(path)
    assert epoch == 3
    assert list(loaded.values()) == records
    first = path.read_bytes()
    write_snapshot(path, epoch, loaded.values(), len(loaded))
    assert path.read_bytes() == first


def test_every_corrupt_byte_is_refused_with_a_clear_error(tmp_path):
    path = tmp_path / "s.snapshot"
    write_snapshot(path, 3, sample_records(), 2)
    data = path.read_bytes()
    for position in range(len(data)):
        corrupt = bytearray(data)
        corrupt[position] ^= 0x01
        with pytest.raises(SnapshotCorrupt):
            decode_snapshot(bytes(corrupt), "s.snapshot")
    corrupt = bytearray(data)
    corrupt[len(data) // 2] ^= 0x20
    path.write_bytes(corrupt)
    with pytest.raises(SnapshotCorrupt, match=r"checksum mismatch.*not loaded"):
        FileStateProvider(path)


def test_truncated_snapshot_is_refused(tmp_path):
    path = tmp_path / "s.snapshot"
    write_snapshot(path, 3, sample_records(), 2)
    data = path.read_bytes()
    for cut in (0, 10, len(data) // 2, len(data) - 1):
        with pytest.raises(SnapshotCorrupt):
            decode_snapshot(data[:cut], "s")


def _resealed(body: bytes) -> bytes:
    return body + b"sha256:" + hashlib.sha256(body).hexdigest().encode() + b"\n"


def _body(path: Path) -> bytes:
    data = path.read_bytes()
    return data[: data.rindex(b"sha256:")]


def test_records_out_of_order_are_refused_even_with_a_valid_checksum(tmp_path):
    path = tmp_path / "s.snapshot"
    write_snapshot(path, 3, sample_records(), 2)
    magic, header, alpha, beta, _ = _body(path).split(b"\n")
    swapped = b"\n".join([magic, header, beta, alpha, b""])
    with pytest.raises(SnapshotCorrupt, match="is not after"):
        decode_snapshot(_resealed(swapped), "s")
    duplicated = b"\n".join([magic, b'{"epoch":3,"records":2}', alpha, alpha, b""])
    with pytest.raises(SnapshotCorrupt, match="is not after"):
        decode_snapshot(_resealed(duplicated), "s")


def test_non_canonical_json_and_wrong_counts_are_refused(tmp_path):
    path = tmp_path / "s.snapshot"
    write_snapshot(path, 3, sample_records(), 2)
    magic, header, alpha, beta, _ = _body(path).split(b"\n")
    spaced = b"\n".join([magic, b'{"epoch": 3, "records": 2}', alpha, beta, b""])
    with pytest.raises(SnapshotCorrupt, match="canonical"):
        decode_snapshot(_resealed(spaced), "s")
    miscounted = b"\n".join([magic, b'{"epoch":3,"records":3}', alpha, beta, b""])
    with pytest.raises(SnapshotCorrupt, match="announces 3"):
        decode_snapshot(_resealed(miscounted), "s")
    extra_field = beta[:-1] + b',"zzz":1}'
    with pytest.raises(SnapshotCorrupt, match="fields"):
        decode_snapshot(_resealed(b"\n".join([magic, header, alpha, extra_field, b""])), "s")


def test_reader_is_capped_at_4_mib(tmp_path):
    path = tmp_path / "big.snapshot"
    path.write_bytes(b"x" * SNAPSHOT_BYTES_MAX)
    with pytest.raises(SnapshotCorrupt):  # exactly at the cap: read, then refused as not V1
        read_snapshot(path)
    path.write_bytes(b"x" * (SNAPSHOT_BYTES_MAX + 1))
    with pytest.raises(SnapshotTooLarge):
        read_snapshot(path)


def test_writer_bound_is_exact(tmp_path):
    fd = os.open(tmp_path / "w", os.O_WRONLY | os.O_CREAT)
    try:
        writer = HashingBufferedWriter(fd, 100)
        writer.write(b"a" * 100)
        with pytest.raises(SnapshotTooLarge):
            writer.write(b"b")
        writer.flush()
    finally:
        os.close(fd)
    assert (tmp_path / "w").read_bytes() == b"a" * 100


def test_save_streams_through_a_fixed_64_kib_buffer(tmp_path, monkeypatch):
    writes: list[int] = []
    real_write = os.write

    def recording_write(fd, data):
        writes.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(snapshot_module.os, "write", recording_write)
    definition = "d" * 500
    records = [DurableTaskRecord(f"task-{i:04d}", definition, DUE, 1, 0) for i in range(1024)]
    path = tmp_path / "s.snapshot"
    write_snapshot(path, 1, records, len(records))
    assert WRITE_BUFFER_BYTES == 64 * 1024
    assert path.stat().st_size > 8 * WRITE_BUFFER_BYTES
    assert max(writes) == WRITE_BUFFER_BYTES
    assert sum(writes) == path.stat().st_size
    assert len(read_snapshot(path)[1]) == 1024


def test_failed_save_leaves_the_previous_snapshot_and_no_temporary(tmp_path):
    path = tmp_path / "s.snapshot"
    write_snapshot(path, 1, sample_records(), 2)
    before = path.read_bytes()
    with pytest.raises(ValueError, match="announced"):
        write_snapshot(path, 2, sample_records(), 3)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["s.snapshot"]


def test_second_provider_in_the_same_process_is_refused(tmp_path):
    path = tmp_path / "s.snapshot"
    with FileStateProvider(path), pytest.raises(ProviderLocked, match="this process"):
        FileStateProvider(path)
    with FileStateProvider(path) as reopened:  # released on close
        assert reopened.records() == []


HOLDER = """
import sys
from appliance.local import FileStateProvider
provider = FileStateProvider(sys.argv[1])
provider.register("held", "d", None, 1)
print("holding", flush=True)
sys.stdin.readline()
"""


def test_two_processes_contend_and_exactly_one_holds_the_lock(tmp_path):
    path = tmp_path / "s.snapshot"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert holder.stdout.readline() == "holding\n"
        with pytest.raises(ProviderLocked, match="another process"):
            FileStateProvider(path)
    finally:
        holder.communicate("done\n", timeout=30)
    with FileStateProvider(path) as provider:
        assert [r.task_key for r in provider.records()] == ["held"]


KILLED_MID_SAVE = """
import sys, threading
from appliance.local import FileStateProvider
from appliance.local.durable import snapshot
provider = FileStateProvider(sys.argv[1])
provider.register("kept", "first", None, 1)
real_flush = snapshot.HashingBufferedWriter.flush
def stalled_flush(self):
    real_flush(self)
    print("mid-save", flush=True)
    threading.Event().wait()
snapshot.HashingBufferedWriter.flush = stalled_flush
provider.register("lost", "d" * 400, None, 1)
"""


def test_a_process_killed_mid_save_leaves_the_previous_snapshot_intact(tmp_path):
    path = tmp_path / "s.snapshot"
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_MID_SAVE, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert child.stdout.readline() == "mid-save\n"
        temporaries = list(tmp_path.glob(".s.snapshot.*.tmp"))
        assert len(temporaries) == 1 and temporaries[0].stat().st_size > 0
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    with FileStateProvider(path) as provider:
        assert [(r.task_key, r.definition) for r in provider.records()] == [("kept", "first")]
    assert list(tmp_path.glob(".s.snapshot.*.tmp")) == []  # the dead save's temporary is gone


def test_save_never_holds_the_whole_file_in_memory(tmp_path):
    import tracemalloc

    definition = "d" * 500
    records = [DurableTaskRecord(f"task-{i:04d}", definition, DUE, 1, 0) for i in range(1024)]
    path = tmp_path / "s.snapshot"
    tracemalloc.start()
    try:
        write_snapshot(path, 1, records, len(records))
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size_bytes = path.stat().st_size
    assert size_bytes > 600_000
    assert peak_bytes < WRITE_BUFFER_BYTES + 16 * 1024  # the fixed buffer plus one record


def test_record_count_is_bounded_to_1024(tmp_path):
    path = tmp_path / "s.snapshot"
    records = [DurableTaskRecord(f"t{i:04d}", "d", None, 1, 0) for i in range(1025)]
    write_snapshot(path, 1, records[:1024], 1024)
    assert len(read_snapshot(path)[1]) == 1024
    with pytest.raises(SnapshotTooLarge, match="1025 records"):
        write_snapshot(path, 1, records, 1025)
    magic, _, *rest = _body(path).split(b"\n")
    forged = b"\n".join([magic, b'{"epoch":1,"records":1025}', *rest])
    with pytest.raises(SnapshotCorrupt, match=r"0\.\.1024"):
        decode_snapshot(_resealed(forged), "s")


def test_claim_owner_is_validated_on_load(tmp_path):
    path = tmp_path / "s.snapshot"
    write_snapshot(path, 3, sample_records(), 2)
    forged = _body(path).replace(b'"owner":"node-a"', b'"owner":"node a"')
    with pytest.raises(SnapshotCorrupt, match="owner"):
        decode_snapshot(_resealed(forged), "s")


def test_the_documented_example_is_what_the_writer_produces(tmp_path):
    doc = (REPO / "docs" / "local" / "snapshot-v1.md").read_text(encoding="utf-8")
    example = doc.split("## Example", 1)[1].split("```", 2)[1].strip("\n").split("\n")
    path = tmp_path / "s.snapshot"
    write_snapshot(path, 3, sample_records()[1:], 1)
    written = path.read_bytes().decode().split("\n")
    assert written[:3] == example[:3]
    assert example[3].startswith("sha256:") and written[3].startswith("sha256:")
