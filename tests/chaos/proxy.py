"""A fault-injecting TCP proxy: one listening port per directed link, forwarding to a target.

Theory of operation: every link (say ``v1->v2``, ``runner->worker``, ``worker->adm-v3``) is a
listening socket on loopback whose connections are spliced to the link's target, in both
directions, by one asyncio loop running in a background thread. The link's current :class:`Fault`
is read for every chunk, so a fault set mid-connection takes effect at once:

* ``delay_ms`` holds each chunk back before forwarding it (both directions);
* ``block_up`` / ``block_down`` swallow the bytes of one direction (client→target, target→client):
  the sender sees a successful write and then silence, which is what an ambiguous send looks like;
  a connection that swallowed bytes is *poisoned* (its byte stream is no longer coherent) and is
  closed when the fault is lifted;
* ``reset_probability`` closes a new connection at once, before any byte is forwarded (a definite
  connection failure);
* ``cut`` closes every open connection of the link and refuses new ones.

Nothing here decides *when* to inject: the chaos driver does, from its seeded random generator.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

CHUNK_BYTES = 65536


@dataclass(frozen=True)
class Fault:
    delay_ms: int = 0
    block_up: bool = False
    block_down: bool = False
    reset_probability: float = 0.0
    cut: bool = False

    @property
    def healthy(self) -> bool:
        return self == HEALTHY


HEALTHY = Fault()


@dataclass
class Link:
    name: str
    target_port: int
    listen_port: int = 0
    fault: Fault = HEALTHY
    connections: int = 0
    resets: int = 0
    swallowed_bytes: int = 0
    _open: set[Any] = field(default_factory=set)
    _server: asyncio.base_events.Server | None = None


class Proxy:
    """All links of one chaos run; thread-safe control from the driver thread."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self.links: dict[str, Link] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="proxy", daemon=True)
        self._thread.start()

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    def add(self, name: str, target_port: int) -> int:
        """Start the link ``name`` forwarding to ``127.0.0.1:target_port``; its listening port."""
        link = Link(name, target_port)

        async def start() -> None:
            link._server = await asyncio.start_server(
                lambda r, w: self._accept(link, r, w), "127.0.0.1", 0
            )
            link.listen_port = int(link._server.sockets[0].getsockname()[1])

        self._call(start())
        self.links[name] = link
        return link.listen_port

    def set_fault(self, name: str, fault: Fault) -> None:
        link = self.links[name]

        async def apply() -> None:
            old = link.fault
            link.fault = fault
            if fault.cut or (not old.healthy and fault.healthy):
                # Cut: drop everything; heal: drop connections whose streams lost bytes.
                for conn in list(link._open):
                    if fault.cut or conn.poisoned:
                        conn.close()

        self._call(apply())

    def heal_all(self) -> None:
        for name in self.links:
            self.set_fault(name, HEALTHY)

    def close(self) -> None:
        async def stop() -> None:
            for link in self.links.values():
                if link._server is not None:
                    link._server.close()
                for conn in list(link._open):
                    conn.close()

        with contextlib.suppress(Exception):
            self._call(stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _accept(
        self, link: Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        fault = link.fault
        link.connections += 1
        if fault.cut or (fault.reset_probability and self._rng.random() < fault.reset_probability):
            link.resets += 1
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", link.target_port)
        except OSError:
            writer.transport.abort()
            return
        conn = _Connection(writer, up_writer)
        link._open.add(conn)
        try:
            await asyncio.gather(
                self._pipe(link, conn, reader, up_writer, up=True),
                self._pipe(link, conn, up_reader, writer, up=False),
            )
        finally:
            link._open.discard(conn)
            conn.close()

    async def _pipe(
        self,
        link: Link,
        conn: _Connection,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        *,
        up: bool,
    ) -> None:
        try:
            while data := await source.read(CHUNK_BYTES):
                fault = link.fault
                if fault.delay_ms:
                    await asyncio.sleep(fault.delay_ms / 1000)
                    fault = link.fault
                if conn.poisoned or (fault.block_up if up else fault.block_down):
                    conn.poisoned = True
                    link.swallowed_bytes += len(data)
                    continue
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            conn.close()


class _Connection:
    def __init__(self, client: asyncio.StreamWriter, target: asyncio.StreamWriter) -> None:
        self.client = client
        self.target = target
        self.poisoned = False

    def close(self) -> None:
        for writer in (self.client, self.target):
            with contextlib.suppress(Exception):
                writer.transport.abort()
