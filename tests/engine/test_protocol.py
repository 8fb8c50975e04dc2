"""The framed JSON protocol between engine and child."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

import pytest

from appliance.engine.protocol import (
    FRAME_HEADER,
    FrameReader,
    FrameTimeout,
    PeerClosed,
    ProtocolError,
    encode_frame,
    truncate_utf8,
    write_frame,
)


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    for fd in (read_fd, write_fd):
        with contextlib.suppress(OSError):
            os.close(fd)


def test_frames_round_trip_in_order(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    write_frame(write_fd, {"type": "a", "text": "h\u00e9llo \U0001f600"}, 1024)
    write_frame(write_fd, {"type": "b"}, 1024)
    reader = FrameReader(read_fd, 1024)
    assert reader.read(time.monotonic() + 1) == {"type": "a", "text": "h\u00e9llo \U0001f600"}
    assert reader.read(time.monotonic() + 1) == {"type": "b"}


def test_frame_exactly_at_the_size_limit_passes_and_one_byte_more_fails(
    pipe: tuple[int, int],
) -> None:
    body_size = len(encode_frame({"type": "x", "p": ""}, 1 << 20)) - FRAME_HEADER.size
    exact = {"type": "x", "p": "y" * 10}
    limit = body_size + 10
    read_fd, write_fd = pipe
    write_frame(write_fd, exact, limit)
    assert FrameReader(read_fd, limit).read(time.monotonic() + 1) == exact
    with pytest.raises(ProtocolError):
        encode_frame({"type": "x", "p": "y" * 11}, limit)


def test_reader_rejects_an_announced_oversized_frame(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    os.write(write_fd, FRAME_HEADER.pack(1025))
    with pytest.raises(ProtocolError):
        FrameReader(read_fd, 1024).read(time.monotonic() + 1)


def test_reader_rejects_non_json_and_untyped_frames(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    os.write(write_fd, FRAME_HEADER.pack(3) + b"{{{")
    reader = FrameReader(read_fd, 1024)
    with pytest.raises(ProtocolError):
        reader.read(time.monotonic() + 1)
    os.write(write_fd, FRAME_HEADER.pack(2) + b"[]")
    with pytest.raises(ProtocolError):
        reader.read(time.monotonic() + 1)


def test_reader_gives_up_at_the_deadline(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    os.write(write_fd, FRAME_HEADER.pack(10) + b"{")  # a partial frame
    started = time.monotonic()
    with pytest.raises(FrameTimeout):
        FrameReader(read_fd, 1024).read(started + 0.05)
    assert time.monotonic() - started < 1.0


def test_reader_reports_a_closed_peer(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    os.write(write_fd, FRAME_HEADER.pack(10) + b"{")
    os.close(write_fd)
    with pytest.raises(PeerClosed):
        FrameReader(read_fd, 1024).read(time.monotonic() + 1)


def test_past_deadline_still_reads_what_is_already_buffered(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    write_frame(write_fd, {"type": "late"}, 1024)
    assert FrameReader(read_fd, 1024).read(time.monotonic() - 1) == {"type": "late"}


@pytest.mark.parametrize(
    ("text", "limit", "expected", "cut"),
    [
        ("abc", 3, "abc", False),
        ("abcd", 3, "abc", True),
        ("a\u00e9", 3, "a\u00e9", False),
        ("a\u00e9", 2, "a", True),
        ("\U0001f600", 3, "", True),
    ],
)
def test_truncate_utf8_cuts_on_character_boundaries(
    text: str, limit: int, expected: str, cut: bool
) -> None:
    assert truncate_utf8(text, limit) == (expected, cut)
