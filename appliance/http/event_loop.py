"""The listener's event loop: epoll (``selectors``) with registrations kept between passes.

Why not waitress's own loop: it builds a new ``poll()`` set from every connection's
``readable()`` / ``writable()`` on every pass. With hundreds of connections each trickling a byte
a second (a slow-header flood), every byte costs a pass over all of them: the work grows with the
square of the connections, and on this machine 1,500 of them kept one core busy and delayed
honest requests by seconds.

Here a connection's interest is evaluated again only when something could have changed it: it
had an event in this pass, it is new (accepted) or gone, or a worker thread changed it. That
holds for a connection with no interest at all (its request is being served) too: looking at
those on every pass, one pass per event, was a third of a busy worker's CPU. Waitress's worker
threads change a connection only while serving it; ``Channel`` then puts its descriptor on
the server's ``changed`` queue and pulls the trigger (appliance.http.connections), so the loop
re-evaluates exactly those. Every connection is re-evaluated once a second as well (the upkeep
may have marked any of them). The per-event handling is waitress's own
(``wasyncore.readwrite``).
"""

from __future__ import annotations

import contextlib
import select
import selectors
import time
from collections import deque
from typing import Any

from waitress import wasyncore

_READ = selectors.EVENT_READ
_WRITE = selectors.EVENT_WRITE


def _interest(obj: Any) -> int:
    mask = _READ if obj.readable() else 0
    if not obj.accepting and obj.writable():
        mask |= _WRITE
    return mask


def run_loop(
    server: Any, socket_map: dict[int, Any], timeout_s: float, changed: deque[int]
) -> None:
    """Serve ``socket_map`` until it is empty (``HttpServer.stop`` empties it in the loop).

    ``changed``: descriptors of connections other threads changed (appended there, popped here:
    both atomic)."""
    selector = selectors.DefaultSelector()
    registered: dict[int, tuple[Any, int]] = {}  # fd -> (object, mask)
    evaluated: dict[int, Any] = {}  # fd -> the object last evaluated, registered or not

    def update(fd: int, obj: Any) -> None:
        mask = _interest(obj)
        evaluated[fd] = obj
        known = registered.get(fd)
        if known is not None and known[0] is not obj:  # the descriptor was reused
            _forget(selector, fd)
            registered.pop(fd, None)
            known = None
        if known is None:
            if mask:
                selector.register(fd, mask)
                registered[fd] = (obj, mask)
        elif mask == 0:
            _forget(selector, fd)
            del registered[fd]
        elif mask != known[1]:
            selector.modify(fd, mask)
            registered[fd] = (obj, mask)

    def forget_gone() -> None:
        for fd in registered.keys() - socket_map.keys():
            _forget(selector, fd)
            del registered[fd]
        for fd in evaluated.keys() - socket_map.keys():
            del evaluated[fd]

    def unseen() -> list[int]:
        # Objects the loop has not evaluated: accepted since, or a descriptor reused by a new
        # object (accepting happens in this thread, on the server's event).
        return [fd for fd, obj in socket_map.items() if evaluated.get(fd) is not obj]

    # Not-interested objects are not in ``registered``; they are re-evaluated when a worker
    # thread changes them, and on full passes.
    full = True
    accepted = False  # the server had an event: new objects may be in the map
    touched: set[int] = set()
    next_full = 0.0
    try:
        while socket_map:
            now = time.monotonic()
            if now >= next_full:  # the upkeep may have marked any connection
                full = True
                next_full = now + 1.0
            forget_gone()
            server_fd = server._fileno
            if full:
                for fd, obj in list(socket_map.items()):
                    update(fd, obj)
            else:
                while changed:
                    touched.add(changed.popleft())
                if accepted or len(evaluated) != len(socket_map):
                    touched.update(unseen())
                for fd in touched:
                    obj = socket_map.get(fd)
                    if obj is not None:
                        update(fd, obj)
                # The server's readable() runs its upkeep and decides about accepting.
                if server_fd is not None and server_fd in socket_map:
                    update(server_fd, server)
            full = False
            touched = set()
            accepted = False
            for key, events in selector.select(timeout_s):
                fd = key.fd
                obj = socket_map.get(fd)
                if obj is None:
                    continue
                flags = (select.POLLIN if events & _READ else 0) | (
                    select.POLLOUT if events & _WRITE else 0
                )
                wasyncore.readwrite(obj, flags)
                touched.add(fd)
                accepted = accepted or fd == server_fd
    finally:
        selector.close()


def _forget(selector: selectors.BaseSelector, fd: int) -> None:
    with contextlib.suppress(KeyError, ValueError, OSError):  # already gone: nothing to undo
        selector.unregister(fd)
