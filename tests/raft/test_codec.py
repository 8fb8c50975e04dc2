"""Wire codec: every message round-trips; a full batch fits the 16 MiB body cap; anything
malformed, oversized or from another contract is refused with a clear error."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.raft import (
    AppendRequest,
    AppendResponse,
    CodecError,
    DigestMismatch,
    Entry,
    EntryKind,
    Heartbeat,
    HeartbeatResponse,
    VoteRequest,
    VoteResponse,
)
from appliance.raft.codec import (
    BATCH_ENTRIES_MAX,
    BATCH_PAYLOAD_BYTES_MAX,
    BODY_BYTES_MAX,
    decode,
    encode,
)

DIGEST = "a" * 64
ids = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
u64 = st.integers(min_value=0, max_value=2**64 - 1)
small = st.integers(min_value=0, max_value=2**40)


@st.composite
def append_requests(draw: st.DrawFn) -> AppendRequest:
    prev_index = draw(small)
    prev_term = draw(st.integers(min_value=0, max_value=1000))
    count = draw(st.integers(min_value=0, max_value=BATCH_ENTRIES_MAX))
    term = prev_term + draw(st.integers(min_value=0, max_value=5))
    entries = []
    entry_term = prev_term
    for i in range(count):
        entry_term = draw(st.integers(min_value=entry_term, max_value=term))
        kind = draw(st.sampled_from(EntryKind))
        data = draw(st.binary(max_size=64))
        entries.append(Entry(prev_index + 1 + i, entry_term, kind, data))
    return AppendRequest(
        draw(ids), draw(ids), term, prev_index, prev_term, tuple(entries), draw(small)
    )


messages = st.one_of(
    st.builds(VoteRequest, ids, ids, u64, u64, u64, st.booleans()),
    st.builds(VoteResponse, ids, ids, u64, st.booleans(), st.booleans()),
    append_requests(),
    st.builds(AppendResponse, ids, ids, u64, st.booleans(), u64, u64, u64),
    st.builds(Heartbeat, ids, ids, u64, u64, u64),
    st.builds(HeartbeatResponse, ids, ids, u64, u64),
)


@given(messages)
def test_every_message_round_trips(message) -> None:  # type: ignore[no-untyped-def]
    assert decode(encode(message, DIGEST), DIGEST) == message


@given(messages, st.integers(min_value=0, max_value=10_000), st.integers(0, 255))
def test_any_corruption_is_refused_or_decodes_to_a_valid_message(  # type: ignore[no-untyped-def]
    message, position, value
) -> None:
    data = bytearray(encode(message, DIGEST))
    data[position % len(data)] = value
    try:
        decoded = decode(bytes(data), DIGEST)
    except CodecError:
        return
    assert type(decoded) in {
        VoteRequest,
        VoteResponse,
        AppendRequest,
        AppendResponse,
        Heartbeat,
        HeartbeatResponse,
    }


def full_batch(payload_bytes: int, count: int = BATCH_ENTRIES_MAX) -> AppendRequest:
    per_entry = payload_bytes // count
    entries = [Entry(i + 1, 1, EntryKind.NORMAL, b"x" * (per_entry - 1)) for i in range(count)]
    short = payload_bytes - per_entry * count
    if short:
        last = entries[-1]
        entries[-1] = Entry(last.index, 1, last.kind, last.data + b"x" * short)
    return AppendRequest("n1", "n2", 1, 0, 0, tuple(entries), 0)


def test_a_full_batch_of_32_entries_and_12_mib_fits_the_16_mib_body_cap() -> None:
    batch = full_batch(BATCH_PAYLOAD_BYTES_MAX)
    assert sum(e.payload_bytes for e in batch.entries) == BATCH_PAYLOAD_BYTES_MAX
    body = encode(batch, DIGEST)
    assert len(body) <= BODY_BYTES_MAX
    assert len(body) - BATCH_PAYLOAD_BYTES_MAX < 2048  # framing overhead stays small
    assert decode(body, DIGEST) == batch


def test_one_byte_over_the_batch_payload_cap_is_refused_both_ways() -> None:
    batch = full_batch(BATCH_PAYLOAD_BYTES_MAX + 1)
    with pytest.raises(CodecError, match="exceeds"):
        encode(batch, DIGEST)
    ok = bytearray(encode(full_batch(BATCH_PAYLOAD_BYTES_MAX), DIGEST))
    ok += b"x"  # grow the last entry's payload by one byte and fix its length field
    tail = len(ok) - 1 - (BATCH_PAYLOAD_BYTES_MAX // BATCH_ENTRIES_MAX)
    (length,) = struct.unpack(">I", ok[tail - 4 : tail])
    ok[tail - 4 : tail] = struct.pack(">I", length + 1)
    with pytest.raises(CodecError, match="payload exceeds"):
        decode(bytes(ok), DIGEST)


def test_33_entries_are_refused_both_ways() -> None:
    entries = tuple(Entry(i + 1, 1, EntryKind.NORMAL, b"") for i in range(33))
    message = AppendRequest("n1", "n2", 1, 0, 0, entries, 0)
    with pytest.raises(CodecError, match="33 entries"):
        encode(message, DIGEST)
    exactly = encode(AppendRequest("n1", "n2", 1, 0, 0, entries[:32], 0), DIGEST)
    assert len(decode(exactly, DIGEST).entries) == 32  # type: ignore[union-attr]


def test_a_body_over_16_mib_is_refused_before_parsing() -> None:
    with pytest.raises(CodecError, match="exceeds"):
        decode(b"RAFT" + b"\x00" * BODY_BYTES_MAX, DIGEST)


def test_another_contract_digest_is_refused_and_names_the_sender() -> None:
    body = encode(HeartbeatResponse("n2", "n1", 3, 0), "b" * 64)
    with pytest.raises(DigestMismatch) as refused:
        decode(body, DIGEST)
    assert refused.value.sender == "n2"


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        (lambda b: b[:-1], "truncated"),
        (lambda b: b + b"\x00", "trailing"),
        (lambda b: b"XXXX" + b[4:], "magic"),
        (lambda b: b[:4] + b"\x01" + b[5:], "version"),
        (lambda b: b[:5] + b"\x0a" + b[6:], "kind"),
    ],
)
def test_malformed_bodies_are_refused(mutate, error) -> None:  # type: ignore[no-untyped-def]
    body = encode(VoteResponse("n2", "n1", 3, True, False), DIGEST)
    with pytest.raises(CodecError, match=error):
        decode(mutate(body), DIGEST)


def test_a_flag_other_than_0_or_1_is_refused() -> None:
    body = bytearray(encode(VoteResponse("n2", "n1", 3, True, False), DIGEST))
    body[-2] = 2
    with pytest.raises(CodecError, match="0 or 1"):
        decode(bytes(body), DIGEST)


def test_non_contiguous_or_future_term_entries_are_refused() -> None:
    gap = AppendRequest("n1", "n2", 2, 5, 1, (Entry(7, 1, EntryKind.NORMAL, b""),), 0)
    with pytest.raises(CodecError, match="contiguous"):
        decode(encode(gap, DIGEST), DIGEST)
    future = AppendRequest("n1", "n2", 2, 5, 1, (Entry(6, 3, EntryKind.NORMAL, b""),), 0)
    with pytest.raises(CodecError, match="term"):
        decode(encode(future, DIGEST), DIGEST)


def test_a_bad_node_id_is_refused() -> None:
    body = encode(HeartbeatResponse("n 2", "n1", 1, 0), DIGEST)
    with pytest.raises(CodecError, match="node id"):
        decode(body, DIGEST)


def test_the_same_entries_sent_to_two_followers_encode_alike_and_others_do_not_reuse_them() -> None:
    """A leader's second append of the same new entries reuses the first one's block; any other
    entries (equal values, other objects, another length) are encoded afresh."""
    entries = (Entry(6, 2, EntryKind.NORMAL, b"a"), Entry(7, 2, EntryKind.NORMAL, b"bc"))
    to_n2 = AppendRequest("n1", "n2", 2, 5, 1, entries, 5)
    to_n3 = AppendRequest("n1", "n3", 2, 5, 1, entries, 4)
    assert decode(encode(to_n2, DIGEST), DIGEST) == to_n2
    assert decode(encode(to_n3, DIGEST), DIGEST) == to_n3
    fewer = AppendRequest("n1", "n2", 2, 5, 1, entries[:1], 5)
    assert decode(encode(fewer, DIGEST), DIGEST) == fewer
    other = (Entry(6, 2, EntryKind.NORMAL, b"x"), Entry(7, 2, EntryKind.NORMAL, b"yz"))
    changed = AppendRequest("n1", "n3", 2, 5, 1, other, 5)
    assert decode(encode(changed, DIGEST), DIGEST) == changed
