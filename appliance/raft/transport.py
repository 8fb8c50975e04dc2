"""HTTP transport for Raft messages: the cluster port's routes, one pipeline per peer.

Theory of operation. Raft messages are one-way (the driver's ``Transport.send`` contract): every
message is one ``POST`` of its binary encoding (``codec.py``). A message that asks for an answer
(vote request, append, heartbeat) is handed to the local driver with a ``ReplySlot``; the
request waits (at most ``REPLY_WAIT_S``) until the driver has handled it, and if the driver's
answer to that sender was produced meanwhile — after the fsync it depends on, as always — it is
returned as the body of a ``200``; otherwise the request is answered ``202`` with an empty body
and any later answer travels as a ``POST`` of its own. Either way the HTTP status only says
"received", never "accepted": the answer is an ordinary Raft message, fed to the sender's driver
like any other. Carrying answers back this way halves the HTTP exchanges per replicated entry.
Routes (SPEC §5, issue 4):

    POST /raft/v1/append   AppendRequest, AppendResponse, Heartbeat, HeartbeatResponse,
                           SnapshotChunk, SnapshotResponse
    POST /raft/v1/vote     VoteRequest, VoteResponse (pre-vote and vote)
    GET  /raft/v1/status   JSON: node_id, role, term, leader_id, commit_index, applied_index,
                           last_log_index

Server side. Every route, status included, requires the cluster bearer, checked in constant time
by the shared ``BearerAuth`` middleware before routing and before the body is read; any other
credential, known or not, is 401. Bodies are capped at 16 MiB (413): a full 32-entry / 12 MiB
batch fits the binary framing. A message stamped with another contract digest is refused with
403 ``contract_mismatch`` and logged at ERROR naming the sender — loudly, but at most once per
peer per minute (with a count of what was suppressed), so a misconfigured voter retrying every
heartbeat cannot drown the log while the problem stays visible. Malformed → 400, a message on the
wrong route or addressed to another node → 400. Who may speak (``SenderCheck``, issue 36): under
TLS a message whose ``sender`` is not the node its client certificate names is 403
``sender_mismatch``, and a sender that is not a member of the configuration in force is 403
``not_a_member`` unless Raft needs it heard (appliance/raft/sender_rule.py); a status read needs a
member's certificate.

Client side (``HttpTransport``): one ``PeerPipeline`` per peer (``peer_pipeline.py``: a bounded
queue, a sender thread, one request in flight, heartbeats coalesced, contiguous appends merged,
small requests written directly by the driver when the pipeline is idle) over one kept-alive
``PeerConnection`` (the lean HTTP/1.1 client of the hot path). ``send`` never blocks the driver
thread. A failed send drops the message and what is queued behind it; nothing is retried by
the transport, and the connection never follows redirects nor retries by itself.

A peer answering 403 ``contract_mismatch`` is logged at ERROR with the same once-per-peer-per-
minute limit; a peer refusing our cluster credential (401) at WARNING, rate-limited too.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import falcon

from appliance.config.credentials import Secret
from appliance.http import ApiError, BearerAuth, ClientError, Response, create_app, read_body
from appliance.http.connections import ConnectionPolicy
from appliance.http.direct_server import DirectReply, DirectRequest, DirectServer, Handler
from appliance.http.peer_connection import PeerConnection
from appliance.http.tls import TLS_PEER_ID_ENV
from appliance.raft.codec import BODY_BYTES_MAX, decode, encode
from appliance.raft.errors import CodecError, DigestMismatch
from appliance.raft.messages import (
    AppendRequest,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    Message,
    SnapshotChunk,
    SnapshotResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from appliance.raft.peer_pipeline import (
    ANSWERED,
    DELIVERED,
    FAILED,
    NOT_NOW,
    PeerPipeline,
    PeerStats,
)
from appliance.raft.reply_slot import ANSWER_KINDS, ReplySlot

log = logging.getLogger(__name__)

APPEND_PATH = "/raft/v1/append"
VOTE_PATH = "/raft/v1/vote"
STATUS_PATH = "/raft/v1/status"
APPEND_KINDS = (
    AppendRequest,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    SnapshotChunk,
    SnapshotResponse,
)
# TimeoutNow (leadership transfer) starts an election: it travels with the votes (one-way).
VOTE_KINDS = (VoteRequest, VoteResponse, TimeoutNow)
# answered by one of ANSWER_KINDS
QUESTION_KINDS = (VoteRequest, AppendRequest, Heartbeat, SnapshotChunk)
# How long a request waits for its answer (normally one follower fsync); below the client's
# 2 s read timeout, so a slow disk costs a one-way answer later, never a failed send.
REPLY_WAIT_S = 1.0
# Larger requests are written by the sender thread: the driver must never wait on a socket.
DIRECT_WRITE_BYTES_MAX = 64 * 1024
PEER_QUEUE_MAX = 1024
SEND_BACKOFF_S = 0.05
MISMATCH_LOG_INTERVAL_S = 60.0
FAILURE_LOG_INTERVAL_S = 10.0
CONTRACT_MISMATCH_CODE = "contract_mismatch"
CONNECT_TIMEOUT_MS = 500
READ_TIMEOUT_MS = 2_000
ANSWER_BYTES_MAX = 64 * 1024  # an answer is a few hundred bytes; anything else is an error body
OCTET_STREAM = "application/octet-stream"
# Connections (and so threads) the cluster listener serves at once: a pipeline and a probe per
# peer, status readers and the version gate's polls use a handful; the rest is room that a
# connection flood competes for (the oldest awaiting headers makes room for a newcomer).
CLUSTER_CONNECTIONS_MAX = 128

Clock = Callable[[], float]


def path_for(message: Message) -> str:
    return VOTE_PATH if isinstance(message, VOTE_KINDS) else APPEND_PATH


class RateLimitedLog:
    """Logs a line per key at most once per ``interval_s``; counts what it suppressed."""

    def __init__(self, level: int, interval_s: float, clock: Clock = time.monotonic) -> None:
        self._level = level
        self._interval_s = interval_s
        self._clock = clock
        self._last_s: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

    def report(self, key: str, message: str) -> bool:
        """True if logged now; False if suppressed (and counted for the next line)."""
        now_s = self._clock()
        with self._lock:
            last_s = self._last_s.get(key)
            if last_s is not None and now_s - last_s < self._interval_s:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return False
            suppressed = self._suppressed.pop(key, 0)
            self._last_s[key] = now_s
        suffix = f" ({suppressed} more suppressed since the last report)" if suppressed else ""
        log.log(self._level, "%s%s", message, suffix)
        return True


def mismatch_log(clock: Clock = time.monotonic) -> RateLimitedLog:
    """ERROR, at most once per key (a peer) per minute."""
    return RateLimitedLog(logging.ERROR, MISMATCH_LOG_INTERVAL_S, clock)


# -- server side ---------------------------------------------------------------------------------


class SenderCheck:
    """Who may speak (issue 36): under TLS a message's ``sender`` must be the node id its client
    certificate names (``identity_required``: the listener has TLS, so every request carries
    one); ``refusal(message)`` then says why a sender is not taken (appliance/raft/sender_rule.py:
    not a member of the configuration in force), and ``is_member(node_id)`` gates status reads.
    Refusals are 403 and logged at WARNING, at most once per sender and reason per minute."""

    def __init__(
        self,
        *,
        identity_required: bool,
        refusal: Callable[[Message], str | None] | None = None,
        is_member: Callable[[str], bool] | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.identity_required = identity_required
        self._refusal = refusal
        self._is_member = is_member
        self._log = RateLimitedLog(logging.WARNING, MISMATCH_LOG_INTERVAL_S, clock)

    def message(self, peer: str | None, message: Message) -> None:
        """Refuse (403) ``message`` unless ``peer`` (the node id the connection's client
        certificate names; None without one) may send it."""
        if (self.identity_required or peer is not None) and peer != message.sender:
            self._refuse(
                "sender_mismatch",
                f"a {type(message).__name__} says it is from {message.sender!r}, but the client "
                f"certificate names {peer!r}: a node speaks only for itself",
                key=f"{peer}->{message.sender}",
            )
        why = self._refusal(message) if self._refusal is not None else None
        if why is not None:
            self._refuse("not_a_member", why, key=f"member:{message.sender}")

    def status(self, peer: str | None) -> None:
        """Refuse (403) a status read unless ``peer`` is a member (under TLS)."""
        if not self.identity_required or self._is_member is None:
            return
        if peer is None or not self._is_member(peer):
            self._refuse(
                "not_a_member",
                f"{peer!r} is not a voter or learner of this node's configuration: the status "
                "route answers members only",
                key=f"status:{peer}",
            )

    def _refuse(self, code: str, why: str, *, key: str) -> None:
        self._log.report(key, f"REFUSED on the cluster port ({code}): {why}")
        raise ApiError(403, code, why)


class RaftMessages:
    """One message route's rules, without a web framework: decode, check, deliver, answer.

    ``handle(body, peer)`` returns ``(200, encoded answer)`` when the answer rode back, else
    ``(202, b"")``; refusals raise ``ApiError`` (403 contract mismatch, 400 malformed, wrong
    route, misrouted; 403 ``sender_mismatch`` / ``not_a_member`` from ``senders``). ``peer`` is
    the node id the connection's TLS client certificate names (None without one). Served by the
    ``DirectServer`` of a voter (``raft_listener``: ``DirectRequest.peer_id``) and by the Falcon
    app (``create_raft_app``: ``TLS_PEER_ID_ENV``)."""

    def __init__(
        self,
        kinds: tuple[type, ...],
        node_id: str,
        digest: str,
        deliver: Callable[[Message], None],
        mismatches: RateLimitedLog,
        deliver_with_reply: Callable[[Message, ReplySlot], None] | None,
        reply_wait_s: float,
        senders: SenderCheck | None,
    ) -> None:
        self._kinds = kinds
        self._node_id = node_id
        self._digest = digest
        self._deliver = deliver
        self._mismatches = mismatches
        self._deliver_with_reply = deliver_with_reply
        self._reply_wait_s = reply_wait_s
        self._senders = senders

    def handle(self, body: bytes, peer: str | None = None) -> tuple[int, bytes]:
        try:
            message = decode(body, self._digest)
        except DigestMismatch as exc:
            self._mismatches.report(
                f"from:{exc.sender}",
                f"REFUSED raft message: {exc} — voters must share one sealed contract",
            )
            raise ApiError(403, CONTRACT_MISMATCH_CODE, str(exc)) from None
        except CodecError as exc:
            raise ApiError(400, "malformed_message", str(exc)) from None
        if not isinstance(message, self._kinds):
            raise ApiError(400, "wrong_route", f"{type(message).__name__} does not go here")
        if message.to != self._node_id:
            raise ApiError(400, "misrouted", f"message for {message.to!r} sent to {self._node_id}")
        if self._senders is not None:
            self._senders.message(peer, message)
        if self._deliver_with_reply is not None and isinstance(message, QUESTION_KINDS):
            slot = ReplySlot(message.sender)
            self._deliver_with_reply(message, slot)
            answer = slot.wait(self._reply_wait_s)
            if answer is not None:
                return 200, encode(answer, self._digest)
        else:
            self._deliver(message)
        # 202 with an explicit empty body: waitress closes the connection after a 204 (no
        # Content-Length), which would cost a new TCP connection per message.
        return 202, b""

    def direct(self, request: DirectRequest) -> DirectReply:
        status, answer = self.handle(request.body, request.peer_id)
        return DirectReply(status, answer, OCTET_STREAM if answer else None)


class _MessageResource:
    def __init__(self, messages: RaftMessages) -> None:
        self._messages = messages

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = read_body(req, BODY_BYTES_MAX)
        status, answer = self._messages.handle(body, req.env.get(TLS_PEER_ID_ENV))
        resp.status = falcon.code_to_http_status(status)
        if answer:
            resp.content_type = OCTET_STREAM
        resp.data = answer


class _StatusResource:
    def __init__(
        self, status: Callable[[], Mapping[str, Any]], senders: SenderCheck | None
    ) -> None:
        self._status = status
        self._senders = senders

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        if self._senders is not None:
            self._senders.status(req.env.get(TLS_PEER_ID_ENV))
        resp.media = dict(self._status())


def _message_routes(
    node_id: str,
    digest: str,
    deliver: Callable[[Message], None],
    mismatches: RateLimitedLog | None,
    deliver_with_reply: Callable[[Message, ReplySlot], None] | None,
    reply_wait_s: float,
    senders: SenderCheck | None,
) -> dict[str, RaftMessages]:
    refused = mismatches or mismatch_log()
    return {
        path: RaftMessages(
            kinds, node_id, digest, deliver, refused, deliver_with_reply, reply_wait_s, senders
        )
        for path, kinds in ((APPEND_PATH, APPEND_KINDS), (VOTE_PATH, VOTE_KINDS))
    }


def create_raft_app(
    *,
    node_id: str,
    digest: str,
    deliver: Callable[[Message], None],
    status: Callable[[], Mapping[str, Any]],
    credentials: Mapping[str, Secret | str | None],
    mismatches: RateLimitedLog | None = None,
    deliver_with_reply: Callable[[Message, ReplySlot], None] | None = None,
    reply_wait_s: float = REPLY_WAIT_S,
    senders: SenderCheck | None = None,
) -> falcon.App:
    """The cluster-port routes as a WSGI app (for ``HttpServer``; a voter serves them with
    ``raft_listener``). ``credentials`` maps every role this process knows to its token (so
    they can be told apart in the audit log); only the ``cluster`` role is accepted.

    With ``deliver_with_reply`` (the driver's ``deliver``), votes, appends and heartbeats wait
    for their answer and return it in the response; without it every message gets ``202``.
    ``senders``: who may speak (``SenderCheck``); None takes every message the bearer admits."""
    if credentials.get("cluster") is None:
        raise ValueError("the raft surface needs a 'cluster' credential")
    messages = _message_routes(
        node_id, digest, deliver, mismatches, deliver_with_reply, reply_wait_s, senders
    )
    routes: dict[str, Any] = {path: _MessageResource(m) for path, m in messages.items()}
    routes[STATUS_PATH] = _StatusResource(status, senders)
    return create_app(
        routes=routes,
        credentials=credentials,
        accepted_roles={"cluster"},
        body_bytes_max=BODY_BYTES_MAX,
        surface="raft",
    )


def raft_listener(
    *,
    node_id: str,
    digest: str,
    deliver: Callable[[Message], None],
    status: Callable[[], Mapping[str, Any]],
    credentials: Mapping[str, Secret | str | None],
    host: str,
    port: int,
    name: str,
    deliver_with_reply: Callable[[Message, ReplySlot], None] | None = None,
    reply_wait_s: float = REPLY_WAIT_S,
    ssl_context: ssl.SSLContext | None = None,
    peer_check: Callable[[dict[str, Any] | None], bool] | None = None,
    connection_limit: int = CLUSTER_CONNECTIONS_MAX,
    policy: ConnectionPolicy | None = None,
    senders: SenderCheck | None = None,
) -> DirectServer:
    """The cluster listener of a voter: the same routes and rules as ``create_raft_app``,
    served by a ``DirectServer`` (each connection on its own thread: a peer's message costs one
    thread wake-up on the way in, not three; appliance/http/direct_server.py). Not started.
    Under TLS the server hands each request the node id its client certificate names
    (``DirectRequest.peer_id``), which ``senders`` holds a message's sender to."""
    if credentials.get("cluster") is None:
        raise ValueError("the raft surface needs a 'cluster' credential")
    messages = _message_routes(
        node_id, digest, deliver, None, deliver_with_reply, reply_wait_s, senders
    )

    def status_route(request: DirectRequest) -> DirectReply:
        if senders is not None:
            senders.status(request.peer_id)
        body = json.dumps(dict(status()), separators=(",", ":")).encode("utf-8")
        return DirectReply(200, body, "application/json")

    routes: dict[str, dict[str, Handler]] = {
        path: {"POST": m.direct} for path, m in messages.items()
    }
    routes[STATUS_PATH] = {"GET": status_route}
    return DirectServer(
        routes,
        gate=BearerAuth(credentials, {"cluster"}, surface="raft"),
        host=host,
        port=port,
        name=name,
        body_bytes_max=BODY_BYTES_MAX,
        connection_limit=connection_limit,
        policy=policy,
        ssl_context=ssl_context,
        peer_check=peer_check,
    )


# -- client side ---------------------------------------------------------------------------------


class HttpTransport:
    """``Transport`` for the driver: ``send`` queues (never blocks); one pipeline per peer.

    Answers that come back in response bodies go to the receiver set by ``receive_answers``
    (the local driver's ``deliver``); before one is set they are dropped (Raft resends)."""

    def __init__(
        self,
        *,
        node_id: str,
        peers: Mapping[str, str],  # peer id -> "host:port" of its cluster listener
        digest: str,
        cluster_token: Secret,
        peer_queue_max: int = PEER_QUEUE_MAX,
        backoff_s: float = SEND_BACKOFF_S,
        clock: Clock = time.monotonic,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``ssl_context``: mutual TLS to every peer (appliance.http.tls.client_context with
        ``check_hostname=False``); each peer's certificate must name that peer."""
        if peer_queue_max < 1:
            raise ValueError("peer_queue_max must be >= 1")
        self._node_id = node_id
        self._digest = digest
        self._token = cluster_token
        self._mismatches = mismatch_log(clock)
        self._receive: Callable[[Message], None] | None = None
        self._failures = RateLimitedLog(logging.WARNING, FAILURE_LOG_INTERVAL_S, clock)
        self._ssl_context = ssl_context
        self._peer_queue_max = peer_queue_max
        self._backoff_s = backoff_s
        self._started = False
        self._peers_lock = threading.Lock()  # add_peer/remove_peer against each other
        self._addresses = dict(peers)
        self._pipelines = {
            peer: PeerPipeline(
                peer, _connection_to(addr, peer, ssl_context), self, peer_queue_max, backoff_s
            )
            for peer, addr in peers.items()
        }

    @property
    def dropped(self) -> dict[str, int]:
        return {peer: p.stats.dropped for peer, p in self._pipelines.items()}

    def stats(self, peer: str) -> PeerStats:
        return self._pipelines[peer].stats

    def pending(self, peer: str) -> int:
        return self._pipelines[peer].pending()

    def start(self) -> None:
        self._started = True
        for pipeline in self._pipelines.values():
            pipeline.start()

    def address_of(self, peer: str) -> str | None:
        return self._addresses.get(peer)

    def add_peer(self, peer: str, addr: str) -> bool:
        """Start a pipeline to a member added at run time (membership change); False if one to
        that address exists already. A peer known at another address is moved to the new one."""
        with self._peers_lock:
            if self._addresses.get(peer) == addr:
                return False
            old = self._pipelines.get(peer)
            pipeline = PeerPipeline(
                peer,
                _connection_to(addr, peer, self._ssl_context),
                self,
                self._peer_queue_max,
                self._backoff_s,
            )
            # Copy-on-write: ``send`` and the stats read the dict without the lock.
            self._pipelines = {**self._pipelines, peer: pipeline}
            self._addresses = {**self._addresses, peer: addr}
            if self._started:
                pipeline.start()
        if old is not None:
            old.stop(0.5)
        log.warning("raft peer %s added at %s", peer, addr)
        return True

    def remove_peer(self, peer: str, timeout_s: float = 0.5) -> bool:
        """Stop the pipeline to a member the configuration removed; False if there was none."""
        with self._peers_lock:
            pipeline = self._pipelines.get(peer)
            if pipeline is None:
                return False
            self._pipelines = {p: v for p, v in self._pipelines.items() if p != peer}
            self._addresses = {p: a for p, a in self._addresses.items() if p != peer}
        pipeline.stop(timeout_s)
        log.warning("raft peer %s removed from the transport", peer)
        return True

    def stop(self, timeout_s: float = 2.0) -> None:
        """Drop what is queued, let each in-flight request end (bounded by its timeouts), join."""
        for pipeline in self._pipelines.values():
            pipeline.stop(timeout_s)

    def receive_answers(self, receive: Callable[[Message], None]) -> None:
        """Where answers carried back in response bodies go (set before ``start``)."""
        self._receive = receive

    def send(self, message: Message) -> None:
        pipeline = self._pipelines.get(message.to)
        if pipeline is None:
            log.error("raft message for unknown peer %r dropped", message.to)
            return
        pipeline.put(message)

    # -- the pipelines' Exchange -----------------------------------------------------------------

    def begin(self, connection: PeerConnection, message: Message, *, nowait: bool) -> str:
        body = encode(message, self._digest)
        headers = {"Content-Type": OCTET_STREAM}
        try:
            if not nowait:
                connection.begin(path_for(message), body, headers=headers, bearer=self._token)
            elif len(body) > DIRECT_WRITE_BYTES_MAX or not connection.begin_nowait(
                path_for(message), body, headers=headers, bearer=self._token
            ):
                return NOT_NOW
        except ClientError as exc:
            self._report_failure(message.to, exc)
            return FAILED
        return DELIVERED

    def finish(self, connection: PeerConnection, message: Message) -> str:
        peer = message.to
        try:
            response = connection.finish()
        except ClientError as exc:
            self._report_failure(peer, exc)
            return FAILED
        if response.status == 202:
            return DELIVERED
        if response.status == 200 and isinstance(message, QUESTION_KINDS):
            return ANSWERED if self._take_answer(peer, response.body) else DELIVERED
        self._report_refusal(peer, message, response)
        return FAILED

    def _report_failure(self, peer: str, exc: ClientError) -> None:
        self._failures.report(f"send:{peer}", f"raft send to {peer} failed: {exc.reason}")

    def _take_answer(self, peer: str, body: bytes) -> bool:
        """Feed an answer carried in a response body to the local driver, if it is one."""
        try:
            answer = decode(body, self._digest)
        except CodecError as exc:  # DigestMismatch included
            self._failures.report(f"answer:{peer}", f"raft peer {peer} sent a bad answer: {exc}")
            return False
        if (
            not isinstance(answer, ANSWER_KINDS)
            or answer.sender != peer
            or answer.to != self._node_id
        ):
            self._failures.report(
                f"answer:{peer}",
                f"raft peer {peer} answered with {type(answer).__name__} from "
                f"{answer.sender!r} to {answer.to!r}; dropped",
            )
            return False
        if self._receive is None:
            return False
        self._receive(answer)
        return True

    def _report_refusal(self, peer: str, message: Message, response: Response) -> None:
        code = _error_code(response)
        if response.status == 403 and code == CONTRACT_MISMATCH_CODE:
            self._mismatches.report(
                f"to:{peer}",
                f"raft peer {peer} REFUSED our contract digest — voters must share one sealed "
                "contract",
            )
        elif response.status == 401:
            self._failures.report(
                f"auth:{peer}", f"raft peer {peer} refused our cluster credential (401)"
            )
        else:
            self._failures.report(
                f"status:{peer}",
                f"raft peer {peer} answered {response.status} {code or ''} to "
                f"{type(message).__name__}",
            )


def host_port(addr: str) -> tuple[str, int]:
    """A peer's "host:port" (an IPv6 host in brackets) as (host, port)."""
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def _connection_to(
    addr: str, peer: str, ssl_context: ssl.SSLContext | None = None
) -> PeerConnection:
    host, port = host_port(addr)
    return PeerConnection(
        host,
        port,
        connect_timeout_ms=CONNECT_TIMEOUT_MS,
        read_timeout_ms=READ_TIMEOUT_MS,
        response_bytes_max=ANSWER_BYTES_MAX,
        ssl_context=ssl_context,
        peer_identity=peer if ssl_context is not None else None,
    )


def _error_code(response: Response) -> str | None:
    try:
        document = response.json()
    except ValueError:
        return None
    error = document.get("error") if isinstance(document, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None
