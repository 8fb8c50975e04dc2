"""One etcd watch over the JSON gateway: a streaming POST to ``/v3/watch``, read line by line.

Why not ``HttpClient``: the client's contract is one bounded request → one complete, size-capped
response, and a watch's response never completes — the gateway keeps the HTTP response open and
writes one JSON object per line (``{"result": {...}}``) as events happen. So the stream gets its
own reader: a dedicated ``http.client`` connection, a bound on each line
(``line_bytes_max``), and an idle bound (``idle_timeout_s``) after which the caller simply
re-reads and re-watches (a silently cut TCP connection would otherwise look like a quiet log).

A stream is used once: ``batches()`` yields ``WatchBatch`` objects until it raises
``WatchBroken`` (connection trouble, idle bound, closed by ``close()``) or ``WatchCompacted``
(the start revision was compacted away: the caller re-reads the keys by range instead).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from appliance.http.client import split_url
from appliance.replication.etcd_gateway import KeyValue, b64, kv_from_json


class WatchBroken(Exception):
    """The stream ended or failed; nothing is lost, resume by range from the applied index."""


class WatchCompacted(WatchBroken):
    """The requested start revision is older than etcd's compacted history."""

    def __init__(self, compact_revision: int) -> None:
        self.compact_revision = compact_revision
        super().__init__(f"watch start revision compacted (compact revision {compact_revision})")


@dataclass(frozen=True)
class WatchBatch:
    revision: int  # header revision: every event up to it has been delivered
    puts: tuple[KeyValue, ...]
    deletes: tuple[bytes, ...]


class WatchStream:
    def __init__(
        self,
        endpoint: str,
        key: bytes,
        range_end: bytes,
        start_revision: int,
        *,
        token: str | None = None,
        connect_timeout_s: float = 1.0,
        idle_timeout_s: float = 5.0,
        line_bytes_max: int = 16 * 1024 * 1024,
    ) -> None:
        origin, _ = split_url(endpoint)
        self._origin = origin
        self._request = {
            "create_request": {
                "key": b64(key),
                "range_end": b64(range_end),
                "start_revision": str(start_revision),
            }
        }
        self._token = token
        self._connect_timeout_s = connect_timeout_s
        self._idle_timeout_s = idle_timeout_s
        self._line_bytes_max = line_bytes_max
        self._conn: http.client.HTTPConnection | None = None
        self._closed = threading.Event()

    def close(self) -> None:
        """Unblock a reader from any thread."""
        self._closed.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(2)
            conn.close()

    def _open(self) -> http.client.HTTPResponse:
        cls = http.client.HTTPSConnection if self._origin.scheme == "https" else None
        conn = (cls or http.client.HTTPConnection)(
            self._origin.host, self._origin.port, timeout=self._connect_timeout_s
        )
        self._conn = conn
        headers = {"Content-Type": "application/json"}
        if self._token is not None:
            headers["Authorization"] = self._token
        try:
            conn.connect()
            if self._closed.is_set() or conn.sock is None:
                raise WatchBroken("closed")
            conn.sock.settimeout(self._idle_timeout_s)
            conn.request("POST", "/v3/watch", json.dumps(self._request).encode(), headers)
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise WatchBroken(f"{self._origin}: cannot open the watch ({exc!r})") from None
        if response.status != 200:
            conn.close()
            raise WatchBroken(f"{self._origin}: watch refused with status {response.status}")
        return response

    def batches(self) -> Iterator[WatchBatch]:
        response = self._open()
        try:
            while not self._closed.is_set():
                try:
                    line = response.readline(self._line_bytes_max + 1)
                except (OSError, http.client.HTTPException, ValueError) as exc:
                    raise WatchBroken(f"{self._origin}: watch read failed ({exc!r})") from None
                if not line:
                    raise WatchBroken(f"{self._origin}: watch stream ended")
                if len(line) > self._line_bytes_max or not line.endswith(b"\n"):
                    raise WatchBroken(f"{self._origin}: watch message over {self._line_bytes_max}")
                batch = self._decode(line)
                if batch is not None:
                    yield batch
            raise WatchBroken("closed")
        finally:
            self.close()

    def _decode(self, line: bytes) -> WatchBatch | None:
        try:
            message = json.loads(line)
        except ValueError:
            raise WatchBroken(f"{self._origin}: malformed watch message") from None
        if "error" in message:
            raise WatchBroken(f"{self._origin}: watch error {message['error']!r}"[:300])
        result = message.get("result", {})
        compact = int(result.get("compact_revision", 0))
        if compact:
            raise WatchCompacted(compact)
        if result.get("canceled"):
            raise WatchBroken(f"{self._origin}: watch canceled ({result.get('cancel_reason')})")
        events = result.get("events", [])
        if not events:
            return None  # the "created" acknowledgement or a progress notification
        puts = tuple(kv_from_json(e["kv"]) for e in events if e.get("type", "PUT") == "PUT")
        deletes = tuple(
            kv_from_json(e["kv"]).key for e in events if e.get("type", "PUT") == "DELETE"
        )
        return WatchBatch(int(result["header"]["revision"]), puts, deletes)
