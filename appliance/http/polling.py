"""One zero-timeout ``poll`` on one socket: does it have any of these events right now?

Used to check idle connections before reuse (a peer that closed leaves an end of stream to read;
unsolicited bytes are just as disqualifying) and to finish non-blocking connects. ``poll``
rather than ``select``: no fd_set built per call and no FD_SETSIZE limit, under which a process
holding more than 1,024 descriptors would see every check fail.
"""

from __future__ import annotations

import select
import socket

# Anything but "nothing to read" on an idle connection means: do not reuse it.
STALE_EVENTS = select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP | select.POLLNVAL
CONNECTED_EVENTS = select.POLLOUT | select.POLLERR | select.POLLHUP


def has_events(sock: socket.socket, events: int) -> bool:
    """True if ``sock`` has any of ``events`` now (or cannot be polled at all)."""
    try:
        poller = select.poll()
        poller.register(sock.fileno(), events)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True
