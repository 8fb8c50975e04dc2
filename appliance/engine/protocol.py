"""The framed JSON protocol between the engine and its children (version 3).

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON (one object
with a ``type`` field). Both directions cap the frame size, so a confused or hostile peer can
neither make the other allocate without bound nor smuggle bytes past the framing.

A child hosts up to ``slots`` executions at once, each in its own isolate; every frame about an
execution names it (``execution_id``), and frames of different executions interleave:

    parent -> child   {"type": "configure", "slots": n, "egress": {...} | null}   first, once
    child  -> parent  {"type": "ready", "v": 3, "pid": ..., "slots": n, "executions": 0,
                       "rss_bytes": ...}                                          once, warm
    parent -> child   {"type": "run", "execution_id": ..., ...request...}
    child  -> parent  {"type": "running", "execution_id": ...}   just before the script starts
    child  -> parent  {"type": "output", "execution_id": ..., "text": ..., "truncated": bool}
                      console text as the script writes it (bounded by output_limit_bytes)
    parent -> child   {"type": "stop", "execution_id": ...}                    a cancel
    child  -> parent  {"type": "done", "execution_id": ..., "status": ..., "disposed": bool,
                       "rss_bytes": ..., "egress": {...}, ...}

``done`` comes only once the execution's isolate is terminated and disposed, its request
threads joined and its connections closed, and its slot is free in the child — ``disposed``
says whether each was confirmed (within the run's ``dispose_seconds``). The ``configure``
frame carries the egress handoff with credential values: it is never logged. End
of file on either side ends the conversation: a child whose stdin closes exits; a parent that
reads end of file decides from the exit status what happened to each execution still open.
"""

from __future__ import annotations

import json
import math
import os
import select
import struct
import time
from typing import Any

from appliance.engine.text import well_formed, well_formed_json

PROTOCOL_VERSION = 3

# Set in every child's environment: the pid it must be a child of, and the marker by which a
# restarted worker recognises leftover children (process.kill_recorded_children).
PARENT_PID_ENV = "APPLIANCE_ENGINE_PARENT_PID"

FRAME_HEADER = struct.Struct(">I")

MSG_CONFIGURE = "configure"
MSG_READY = "ready"
MSG_RUN = "run"
MSG_RUNNING = "running"
MSG_OUTPUT = "output"
MSG_STOP = "stop"
MSG_DONE = "done"


class ProtocolError(Exception):
    """The peer sent something that is not a valid frame of this protocol."""


class FrameTimeout(Exception):
    """No complete frame arrived before the deadline."""


class PeerClosed(Exception):
    """The peer closed its end before a complete frame arrived."""


def truncate_utf8(text: str, limit_bytes: int) -> tuple[str, bool]:
    """The longest prefix of well_formed(text) whose UTF-8 form fits in limit_bytes (cut on a
    character boundary), and whether it was cut."""
    text = well_formed(text)
    if len(text) * 4 <= limit_bytes:  # no character encodes to more than four bytes
        return text, False
    encoded = text.encode("utf-8")
    if len(encoded) <= limit_bytes:
        return text, False
    return encoded[:limit_bytes].decode("utf-8", errors="ignore"), True


def encode_frame(message: dict[str, Any], frame_bytes_max: int) -> bytes:
    """One frame; strings are made well-formed first (text.py), so no value a script produced
    can make the writer fail."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    try:
        body = text.encode("utf-8")
    except UnicodeEncodeError:
        body = json.dumps(
            well_formed_json(message), ensure_ascii=False, separators=(",", ":")
        ).encode("utf-8")
    if len(body) > frame_bytes_max:
        raise ProtocolError(f"frame of {len(body)} bytes exceeds {frame_bytes_max}")
    return FRAME_HEADER.pack(len(body)) + body


def write_frame(fd: int, message: dict[str, Any], frame_bytes_max: int) -> None:
    """Write one whole frame to a blocking file descriptor."""
    data = memoryview(encode_frame(message, frame_bytes_max))
    while data:
        written = os.write(fd, data)
        data = data[written:]


class FrameReader:
    """Reads frames from one file descriptor, with an optional monotonic deadline.

    Uses select() so a reader can give up at a deadline without a second thread; the buffer
    keeps partial frames between calls.
    """

    def __init__(self, fd: int, frame_bytes_max: int) -> None:
        self._fd = fd
        self._frame_bytes_max = frame_bytes_max
        self._buffer = bytearray()
        self._closed = False

    def read(self, deadline_monotonic: float | None = None) -> dict[str, Any]:
        while True:
            message = self._take_frame()
            if message is not None:
                return message
            if self._closed:
                raise PeerClosed("peer closed the pipe")
            self._fill(deadline_monotonic)

    def _take_frame(self) -> dict[str, Any] | None:
        if len(self._buffer) < FRAME_HEADER.size:
            return None
        (length,) = FRAME_HEADER.unpack_from(self._buffer)
        if length > self._frame_bytes_max:
            raise ProtocolError(f"frame of {length} bytes exceeds {self._frame_bytes_max}")
        end = FRAME_HEADER.size + length
        if len(self._buffer) < end:
            return None
        body = bytes(self._buffer[FRAME_HEADER.size : end])
        del self._buffer[:end]
        try:
            message = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ProtocolError(f"frame is not UTF-8 JSON: {exc}") from exc
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise ProtocolError("frame is not an object with a string 'type'")
        return message

    def _fill(self, deadline_monotonic: float | None) -> None:
        if deadline_monotonic is not None:
            # A deadline in the past still polls once, so already-buffered bytes are read.
            remaining = max(0.0, deadline_monotonic - time.monotonic())
            # poll(), not select(): a worker holding many connections has descriptors past 1,024.
            poller = select.poll()
            poller.register(self._fd, select.POLLIN)
            if not poller.poll(math.ceil(remaining * 1000)):
                raise FrameTimeout("no frame before the deadline")
        chunk = os.read(self._fd, 65536)
        if not chunk:
            self._closed = True
            return
        self._buffer += chunk
