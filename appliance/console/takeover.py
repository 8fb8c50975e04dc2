"""Handing an event stream's connection from waitress to the console's pusher.

Theory of operation (why: appliance/console/pusher.py). The console's listener is the shared
waitress server (appliance/http) with three small subclasses:

- ``TakeoverTask`` puts ``environ["appliance.console.takeover"]`` in each request; the app calls
  it with a reserved ``Stream`` when it answers ``GET /events``. The app's answer is written as
  usual (status, headers, first events: HTTP/1.1 chunked, since it has no length); at the end
  the task writes no last chunk, so the body stays open, and marks the stream ``ready``.
- ``TakeoverChannel``: waitress closes such a connection once its bytes are flushed (a response
  without a length ends the connection). Instead of closing, the channel leaves waitress's map
  and hands the socket to the stream (``Stream.adopt``), in the event-loop thread, with nothing
  left to send. A connection that ends any other way (the client left, an error, the server
  stops) is closed as usual and the stream is released.
- ``TakeoverServer`` is the listener with that channel.

The worker thread that ran the app is free as soon as the first bytes are queued; nothing of
waitress holds the stream afterwards.
"""

from __future__ import annotations

from typing import Any, Final

from waitress.task import WSGITask

from appliance.console.pusher import Stream
from appliance.http.connections import Channel, ListenerServer

TAKEOVER_KEY: Final = "appliance.console.takeover"


class TakeoverTask(WSGITask):
    def get_environment(self) -> dict[str, Any]:
        environ = super().get_environment()
        environ[TAKEOVER_KEY] = self._offer
        return environ

    def _offer(self, stream: Stream) -> None:
        self.channel.takeover = stream

    def finish(self) -> None:
        stream: Stream | None = getattr(self.channel, "takeover", None)
        if stream is None:
            super().finish()
            return
        if not self.wrote_header:
            self.write(b"")
        # No last chunk: the pusher continues this body (and ends it, chunked, when it closes).
        stream.chunked = bool(self.chunked_response)
        stream.ready = self.close_on_finish  # waitress will close it when flushed: ours then


class TakeoverChannel(Channel):
    task_class = TakeoverTask
    takeover: Stream | None = None

    def handle_close(self) -> None:
        stream, self.takeover = self.takeover, None
        if stream is None:
            super().handle_close()
            return
        sock = self.socket
        if not stream.ready or self.total_outbufs_len or not self.connected or sock is None:
            super().handle_close()
            stream.abandon()
            return
        with self.outbuf_lock:  # waitress's own close without closing the socket
            for outbuf in self.outbufs:
                outbuf.close()
            self.total_outbufs_len = 0
            self.connected = False
            self.outbuf_lock.notify()
        self.del_channel()  # out of the event loop's map and the listener's table
        stream.adopt(sock)


class TakeoverServer(ListenerServer):
    channel_class = TakeoverChannel
