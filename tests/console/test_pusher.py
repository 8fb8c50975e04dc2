"""The event-stream pusher: bounded streams, chunked messages, slow readers dropped, and a body
that always ends on a chunk boundary with the last chunk (read as strictly as a browser does)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from appliance.console.pusher import ENDING_S, HEARTBEAT, LAST_CHUNK, Pusher, Stream
from tests.console.wire import CHUNKED_HEAD, StrictReader
from tests.support import wait_for

WAIT_S = 10.0


@pytest.fixture
def closed() -> list[Stream]:
    return []


def make(closed: list[Stream], **limits: float) -> Pusher:
    return Pusher(on_close=closed.append, **limits).start()  # type: ignore[arg-type]


@pytest.fixture
def pairs() -> Iterator[list[socket.socket]]:
    made: list[socket.socket] = []
    yield made
    for sock in made:
        sock.close()


def adopted(
    pusher: Pusher, pairs: list[socket.socket], *, chunked: bool = True
) -> tuple[Stream, socket.socket]:
    stream = pusher.reserve("session-1", None)
    assert stream is not None
    ours, theirs = socket.socketpair()
    pairs.append(theirs)
    stream.chunked = chunked
    stream.ready = True
    stream.adopt(ours)
    return stream, theirs


def read_until(sock: socket.socket, marker: bytes) -> bytes:
    sock.settimeout(WAIT_S)
    data = b""
    while marker not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_streams_are_bounded_exactly_at_the_limit(closed: list[Stream]) -> None:
    pusher = make(closed, streams_max=3)
    try:
        streams = [pusher.reserve(None, None) for _ in range(3)]
        assert all(s is not None for s in streams)
        assert pusher.reserve(None, None) is None  # one over: refused
        assert pusher.counts.refused_full == 1
        streams[0].abandon()  # type: ignore[union-attr]
        wait_for(lambda: pusher.open_streams == 2, "a released slot", WAIT_S)
        assert pusher.reserve(None, None) is not None
    finally:
        pusher.stop()


def test_a_published_message_reaches_an_adopted_stream_as_one_chunk(
    closed: list[Stream], pairs: list[socket.socket]
) -> None:
    pusher = make(closed)
    try:
        _, client = adopted(pusher, pairs)
        message = b"event: change\ndata: {}\n\n"
        pusher.publish(message)
        framed = b"%x\r\n" % len(message) + message + b"\r\n"
        assert read_until(client, framed).endswith(framed)
    finally:
        pusher.stop()


def test_output_goes_only_to_the_streams_that_follow_its_occurrence(
    closed: list[Stream], pairs: list[socket.socket]
) -> None:
    pusher = make(closed)
    try:
        follower = pusher.reserve(None, 7)
        other = pusher.reserve(None, 8)
        assert follower is not None and other is not None
        ends = []
        for stream in (follower, other):
            ours, theirs = socket.socketpair()
            pairs.append(theirs)
            stream.ready = True
            stream.adopt(ours)
            ends.append(theirs)
        pusher.publish(b"event: output\ndata: 7\n\n", 7)
        pusher.publish(b"event: change\ndata: all\n\n")
        assert b"data: 7" in read_until(ends[0], b"data: all")
        assert b"data: 7" not in read_until(ends[1], b"data: all")
    finally:
        pusher.stop()


def test_a_reader_that_takes_nothing_is_dropped_at_the_buffer_cap(
    closed: list[Stream], pairs: list[socket.socket]
) -> None:
    pusher = make(closed, buffer_bytes_max=64 * 1024, stall_s=60)
    try:
        stream, client = adopted(pusher, pairs)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        message = b"data: " + b"x" * 4000 + b"\n\n"
        for _ in range(400):  # ~1.6 MB, far beyond both socket buffers and the cap
            pusher.publish(message)
        wait_for(lambda: stream.closed, "the slow reader dropped", WAIT_S)
        assert pusher.counts.dropped_slow == 1
        assert closed == [stream]
        assert pusher.open_streams == 0
    finally:
        pusher.stop()


def test_a_reader_that_stalls_is_dropped_after_stall_s(
    closed: list[Stream], pairs: list[socket.socket]
) -> None:
    pusher = make(closed, stall_s=0.5)
    try:
        stream, client = adopted(pusher, pairs)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        message = b"data: " + b"y" * 8000 + b"\n\n"
        for _ in range(40):  # more than the socket buffers hold, less than the cap
            pusher.publish(message)
        wait_for(lambda: stream.closed, "the stalled reader dropped", WAIT_S)
        assert pusher.counts.dropped_slow == 1
    finally:
        pusher.stop()


def test_a_reader_that_keeps_up_is_not_dropped(
    closed: list[Stream], pairs: list[socket.socket]
) -> None:
    pusher = make(closed, buffer_bytes_max=64 * 1024, stall_s=2)
    try:
        stream, client = adopted(pusher, pairs)
        got = bytearray()
        done = threading.Event()

        def read() -> None:
            client.settimeout(WAIT_S)
            while b"data: last" not in got:
                chunk = client.recv(65536)
                if not chunk:
                    break
                got.extend(chunk)
            done.set()

        threading.Thread(target=read, daemon=True).start()
        message = b"data: " + b"z" * 4000 + b"\n\n"
        for batch in range(40):  # 1.6 MB in all, never more than 40 KB ahead of the reader
            for _ in range(10):
                pusher.publish(message)
            sent = (batch + 1) * 10 * len(message)
            wait_for(lambda sent=sent: len(got) >= sent, "the reader to catch up", WAIT_S)
        pusher.publish(b"data: last\n\n")
        assert done.wait(WAIT_S)
        assert not stream.closed and pusher.counts.dropped_slow == 0
    finally:
        pusher.stop()


def test_a_stream_ends_cleanly_after_its_lifetime(
    closed: list[Stream], pairs: list[socket.socket]
) -> None:
    pusher = make(closed, lifetime_s=0.3)
    try:
        stream, client = adopted(pusher, pairs)
        reader = StrictReader(client, head=CHUNKED_HEAD)
        reader.to_close()  # the server shuts its side once the last chunk is out
        assert reader.ended  # the last chunk: the body ends, the browser reconnects
        client.close()  # as a browser does at the end of a body
        wait_for(lambda: stream.closed, "the ended stream closed", WAIT_S)
        assert pusher.counts.ended_lifetime == 1 and pusher.counts.ended_cleanly == 1
        assert pusher.counts.cut == 0
    finally:
        pusher.stop()


def test_ending_a_session_closes_its_streams(
    closed: list[Stream], pairs: list[socket.socket]
) -> None:
    pusher = make(closed)
    try:
        stream, client = adopted(pusher, pairs)
        pusher.end_session("session-1")
        assert read_until(client, LAST_CHUNK).endswith(LAST_CHUNK)
        client.close()
        wait_for(lambda: stream.closed, "the session's stream closed", WAIT_S)
        assert pusher.counts.ended_session == 1
    finally:
        pusher.stop()


def test_a_stream_of_an_expired_session_ends_at_the_heartbeat(
    closed: list[Stream], pairs: list[socket.socket]
) -> None:
    alive = {"session-1": True}
    pusher = Pusher(
        heartbeat_s=0.2, session_alive=lambda sid: alive[sid], on_close=closed.append
    ).start()
    try:
        stream, client = adopted(pusher, pairs)
        assert HEARTBEAT in read_until(client, HEARTBEAT)
        alive["session-1"] = False
        wait_for(lambda: stream.closed, "the stream closed", WAIT_S)
        assert pusher.counts.ended_session == 1
    finally:
        pusher.stop()


def test_a_client_that_hangs_up_frees_its_slot(
    closed: list[Stream], pairs: list[socket.socket]
) -> None:
    pusher = make(closed, streams_max=1)
    try:
        stream, client = adopted(pusher, pairs)
        client.close()
        wait_for(lambda: stream.closed, "the hang-up seen", WAIT_S)
        assert pusher.reserve(None, None) is not None
    finally:
        pusher.stop()


def test_a_reserved_stream_never_handed_over_is_released(closed: list[Stream]) -> None:
    pusher = make(closed, streams_max=1, adopt_deadline_s=0.2)
    try:
        assert pusher.reserve(None, None) is not None
        wait_for(lambda: pusher.open_streams == 0, "the unadopted slot released", WAIT_S)
        assert pusher.counts.never_adopted == 1
    finally:
        pusher.stop()


def test_a_message_published_before_the_takeover_is_framed_as_a_chunk_after_it(
    closed: list[Stream], pairs: list[socket.socket]
) -> None:
    # A commit lands while the app still answers the stream's first bytes: the framing (chunked
    # or not) is not decided yet, so the message must wait as a message, not as bytes.
    pusher = make(closed, lifetime_s=0.5)
    try:
        stream = pusher.reserve(None, None)
        assert stream is not None
        message = b"event: change\ndata: {}\n\n"
        pusher.publish(message, None, 1)
        wait_for(lambda: stream.early, "the message held for the stream", WAIT_S)
        ours, theirs = socket.socketpair()
        pairs.append(theirs)
        stream.chunked = True  # what the takeover task decides at the end of the app's answer
        stream.ready = True
        stream.adopt(ours)
        reader = StrictReader(theirs, head=CHUNKED_HEAD)
        assert reader.to_close() == message  # one chunk, then the last chunk at the lifetime
        assert reader.ended
    finally:
        pusher.stop()


def test_what_the_first_bytes_carried_is_not_sent_again_and_nothing_after_is_lost(
    closed: list[Stream], pairs: list[socket.socket]
) -> None:
    pusher = make(closed, lifetime_s=0.5)
    try:
        stream = pusher.reserve(None, None)
        assert stream is not None
        for event_id in (1, 2, 3):
            pusher.publish(b"id: %d\ndata: x\n\n" % event_id, None, event_id)
        wait_for(lambda: len(stream.early) == 3, "three messages held", WAIT_S)
        stream.replayed_through = 2  # the app's replay and hello reached id 2
        ours, theirs = socket.socketpair()
        pairs.append(theirs)
        stream.chunked = stream.ready = True
        stream.adopt(ours)
        reader = StrictReader(theirs, head=CHUNKED_HEAD)
        assert reader.to_close() == b"id: 3\ndata: x\n\n"
    finally:
        pusher.stop()


def test_a_dropped_slow_reader_still_gets_a_well_framed_body_if_it_reads_again(
    closed: list[Stream], pairs: list[socket.socket]
) -> None:
    pusher = make(closed, buffer_bytes_max=64 * 1024, stall_s=60)
    try:
        stream, client = adopted(pusher, pairs)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        message = b"data: " + b"s" * 3000 + b"\n\n"
        for _ in range(400):  # far beyond the buffers: dropped at the cap
            pusher.publish(message)
        wait_for(lambda: pusher.counts.dropped_slow == 1, "the slow reader dropped", WAIT_S)
        reader = StrictReader(client, head=CHUNKED_HEAD)
        body = reader.to_close(ENDING_S * 4)  # the rest of the begun chunk, then the last one
        assert reader.ended and body and body.endswith(message)
        assert len(body) % len(message) == 0  # whole messages only
        wait_for(lambda: stream.closed, "the dropped stream closed", WAIT_S)
    finally:
        pusher.stop()


def test_a_stream_released_before_its_takeover_ends_its_body_when_adopted(
    closed: list[Stream], pairs: list[socket.socket]
) -> None:
    pusher = make(closed, adopt_deadline_s=0.2)
    try:
        stream = pusher.reserve(None, None)
        assert stream is not None
        wait_for(lambda: stream.closed, "the reservation expired", WAIT_S)
        assert pusher.counts.never_adopted == 1
        ours, theirs = socket.socketpair()
        pairs.append(theirs)
        stream.chunked = stream.ready = True
        stream.adopt(ours)  # the app's answer came late: its body ends, it is not cut
        reader = StrictReader(theirs, head=CHUNKED_HEAD)
        assert reader.to_close() == b"" and reader.ended
    finally:
        pusher.stop()


def test_an_ended_stream_whose_client_takes_nothing_is_closed_after_ending_s(
    closed: list[Stream], pairs: list[socket.socket]
) -> None:
    pusher = make(closed, buffer_bytes_max=64 * 1024, stall_s=60)
    try:
        stream, client = adopted(pusher, pairs)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        for _ in range(400):
            pusher.publish(b"data: " + b"t" * 3000 + b"\n\n")
        wait_for(lambda: pusher.counts.dropped_slow == 1, "the slow reader dropped", WAIT_S)
        assert not stream.closed  # ending: its last bytes may still go out
        wait_for(lambda: stream.closed, "closed after ENDING_S", ENDING_S + WAIT_S)
        assert pusher.counts.cut == 1 and pusher.open_streams == 0
    finally:
        pusher.stop()
