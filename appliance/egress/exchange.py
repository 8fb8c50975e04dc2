"""One ``fetch()`` call from start to end: validate, resolve, decide, send, follow, record.

Theory of operation, per hop (the first request, then each followed redirect):

1. the credentials that would go with this URL are found (credentials.py); a script header that
   one of them sets is refused;
2. the host is resolved once (an IP literal is not resolved); the answer is what the policy sees
   and the only place the connection may go (connection.py);
3. the policy decides over the request as it will be sent — headers lower-case, the default and
   fencing headers included, credentials only by name — and a denial ends the fetch with its
   reason;
4. the request is sent over a pinned connection with the credentials attached; the response
   head is read; a redirect is handed back as it is (``manual``, the default), refused
   (``error``) or followed (``follow``: a new hop, with one more request of ``max_requests``, the
   policy asked again and the credentials matched again — never carried to another origin);
5. the body is read up to ``max_response_bytes`` (one byte more is an error: nothing is cut
   silently) and refused when it, or a response header, holds a credential value that was
   attached (an echo endpoint would otherwise hand the script the secret);
6. one record per hop (record.py), whatever the outcome.

Every wait (resolution, the policy, the network) ends at the exchange's deadline —
``request_timeout_ms`` from the start, never past the attempt's deadline — or at ``abort()``,
whichever comes first; ``run()`` returns only after every socket it opened is closed.
"""

from __future__ import annotations

import ssl
import string
import threading
import time
from concurrent.futures import Future
from http.client import HTTPException
from typing import TYPE_CHECKING, Any, Final

import urllib3
from urllib3.exceptions import HTTPError

from appliance.egress.connection import Aborted, Pin, SocketWatch, addresses_global, open_connection
from appliance.egress.credentials import EgressCredential, for_request
from appliance.egress.headers import (
    CROSS_ORIGIN_DROPPED,
    as_object,
    outgoing_headers,
    script_headers,
)
from appliance.egress.model import (
    DECISION_ALLOW,
    DECISION_DENY,
    DECISION_REFUSED,
    KIND_ABORTED,
    KIND_CREDENTIAL_ECHO,
    KIND_NETWORK,
    KIND_REFUSED,
    KIND_TIMEOUT,
    KIND_TOO_LARGE,
    REDIRECT_ERROR,
    REDIRECT_FOLLOW,
    REDIRECT_MODES,
    EgressDenied,
    FetchAborted,
    FetchFailed,
    FetchRequest,
    FetchResponse,
)
from appliance.egress.policy import Decision
from appliance.egress.record import make_record, url_for_record
from appliance.egress.target import Target, parse_target, refused, resolve_location

if TYPE_CHECKING:
    from appliance.egress.gate import AttemptEgress

REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
READ_CHUNK_BYTES: Final = 64 * 1024
METHOD_BYTES_MAX: Final = 32
# Normalized to upper case as WHATWG fetch does; other methods are sent as given.
NORMALIZED_METHODS: Final = frozenset({"DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"})
REFUSED_METHODS: Final = frozenset({"CONNECT", "TRACE", "TRACK"})
_TOKEN: Final = frozenset("!#$%&'*+-.^_`|~" + string.digits + string.ascii_letters)


class _Hop:
    """One request on the way: what is sent, and what its record says so far."""

    def __init__(
        self, number: int, method: str, target: Target, headers: tuple, body: bytes | None
    ) -> None:
        self.number = number
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self.started = time.monotonic()
        self.redirect_from: str | None = None


class Exchange:
    """One fetch() call (module doc). ``run()`` once, from one thread; ``abort()`` from any."""

    def __init__(
        self, attempt: AttemptEgress, ordinal: int, request: FetchRequest, has_slot: bool
    ) -> None:
        self.ordinal = ordinal
        self._attempt = attempt
        self._request = request
        self._has_slot = has_slot
        self._lock = threading.Lock()
        self._abort_kind: str | None = None
        self._abort_message = ""
        self._waiters: set[threading.Event] = set()
        self._watches: list[SocketWatch] = []
        self._started = False
        self._finished = threading.Event()
        self._timeout_message = "no response in time"

    # -- control, from any thread --

    def abort(self, kind: str = KIND_ABORTED, message: str = "the request was aborted") -> None:
        with self._lock:
            if self._abort_kind is None:
                self._abort_kind, self._abort_message = kind, message
            watches, waiters = list(self._watches), list(self._waiters)
            never_ran = not self._started
        if never_ran:  # nothing to wait for; run() will raise at once
            self._finished.set()
            self._attempt.exchange_finished(self)
        for watch in watches:
            watch.abort()
        for waiter in waiters:
            waiter.set()

    def wait_finished(self, timeout_seconds: float) -> bool:
        """True once ``run()`` returned (or will never start) and its sockets are closed."""
        return self._finished.wait(max(0.0, timeout_seconds))

    @property
    def sockets_open(self) -> int:
        with self._lock:
            return sum(watch.open_count for watch in self._watches)

    # -- the fetch --

    def run(self) -> FetchResponse:
        with self._lock:
            if self._started:
                raise RuntimeError("Exchange.run() may be called once")
            self._started = True
            aborted = self._abort_kind is not None
        if aborted:
            self._finished.set()
            raise self._abort_error()
        gate = self._attempt.gate
        now = time.monotonic()
        budget_s = max(
            0.0, min(gate.settings.request_timeout_ms / 1000, self._attempt.deadline - now)
        )
        deadline = now + budget_s
        self._timeout_message = f"no response within {round(budget_s * 1000)} ms"
        token = gate.deadlines.add(
            deadline, lambda: self.abort(KIND_TIMEOUT, self._timeout_message)
        )
        try:
            return self._fetch(deadline)
        except FetchFailed:
            raise
        except Exception as exc:  # the contract: run() fails only with FetchFailed
            raise FetchFailed(KIND_NETWORK, f"the request failed ({type(exc).__name__})") from None
        finally:
            gate.deadlines.cancel(token)
            for watch in self._watches:
                watch.close()
            self._finished.set()
            self._attempt.exchange_finished(self)

    def _fetch(self, deadline: float) -> FetchResponse:
        request = self._request
        if not self._has_slot:
            self._attempt.count_over_limit()
            raise FetchFailed(KIND_REFUSED, self._attempt.over_limit_message())
        started = time.monotonic()
        try:
            hop = self._first_hop(request)
        except FetchFailed as exc:
            self._record(
                hop=0,
                method=str(request.method)[:METHOD_BYTES_MAX],
                url=url_for_record(str(request.url)),
                decision=DECISION_REFUSED,
                reason=exc.message,
                request_bytes=len(request.body)
                if isinstance(request.body, bytes | bytearray)
                else 0,
                started=started,
            )
            raise
        while True:
            response, location = self._one_hop(hop, deadline)
            if location is None:
                return response
            hop = self._next_hop(hop, response, location)

    def _first_hop(self, request: FetchRequest) -> _Hop:
        method = _method(request.method)
        target = parse_target(request.url)
        if request.redirect not in REDIRECT_MODES:
            raise refused(f"redirect must be one of {', '.join(REDIRECT_MODES)}")
        headers = script_headers(request.headers)
        body = request.body
        if body is not None and not isinstance(body, bytes | bytearray):
            raise refused("the body must be bytes")
        limit = self._attempt.gate.settings.max_request_bytes
        if body is not None and len(body) > limit:
            raise refused(
                f"the request body is {len(body)} bytes, more than egress.max_request_bytes "
                f"({limit})"
            )
        if body is not None and method in ("GET", "HEAD"):
            raise refused(f"a {method} request cannot have a body")
        return _Hop(0, method, target, headers, None if body is None else bytes(body))

    def _next_hop(self, hop: _Hop, response: FetchResponse, location: str) -> _Hop:
        settings = self._attempt.gate.settings
        number = hop.number + 1
        try:
            if number > settings.max_redirects:
                raise FetchFailed(
                    KIND_REFUSED,
                    f"more than {settings.max_redirects} redirects (egress.max_redirects)",
                )
            target = resolve_location(hop.target, location)
        except FetchFailed as exc:  # the hop that was not taken is on the record too
            self._record(
                hop=number,
                method=hop.method,
                url=url_for_record(location),
                decision=DECISION_REFUSED,
                reason=exc.message,
                started=time.monotonic(),
            )
            raise
        if not self._attempt.take_slot():
            self._attempt.count_over_limit()
            raise FetchFailed(KIND_REFUSED, self._attempt.over_limit_message())
        method, body = hop.method, hop.body
        if (response.status == 303 and method != "HEAD") or (
            response.status in (301, 302) and method == "POST"
        ):
            method, body = "GET", None
        headers = hop.headers
        if body is None:
            headers = tuple(
                (name, value) for name, value in headers if not name.startswith("content-")
            )
        if not target.same_origin(hop.target):
            headers = tuple(
                (name, value) for name, value in headers if name not in CROSS_ORIGIN_DROPPED
            )
        following = _Hop(number, method, target, headers, body)
        following.redirect_from = hop.target.url_without_query
        return following

    def _one_hop(self, hop: _Hop, deadline: float) -> tuple[FetchResponse, str | None]:
        gate = self._attempt.gate
        attached = for_request(gate.credentials, hop.target)
        names = sorted(credential.name for credential in attached.values())
        fields: dict[str, Any] = {
            "hop": hop.number,
            "method": hop.method,
            "url": hop.target.url_without_query,
            "credentials": names,
            "request_bytes": len(hop.body or b""),
            "started": hop.started,
        }
        try:
            clash = sorted({name for name, _ in hop.headers} & attached.keys())
            if clash:
                raise refused(
                    f"a script may not set the {clash[0]} header: the worker sets it for this "
                    "origin"
                )
            addresses = self._addresses(hop.target, deadline)
        except FetchFailed as exc:
            self._record(decision=DECISION_REFUSED, reason=exc.message, **fields)
            raise
        sent = outgoing_headers(hop.headers, self._attempt.invocation, self.ordinal)
        decision = self._decide(hop, sent, addresses, names, deadline, fields)
        if not decision.allowed:
            reason = decision.reason or "the policy denied it"
            self._record(decision=DECISION_DENY, reason=reason, **fields)
            raise EgressDenied(reason)
        fields["reason"] = decision.reason
        return self._send(hop, sent, attached, addresses, deadline, fields)

    def _addresses(self, target: Target, deadline: float) -> list[str]:
        if target.host_is_ip:
            return [target.host]
        gate = self._attempt.gate
        future = gate.resolve_pool.submit(gate.resolver, target.host, target.port)
        self._wait(future, deadline - time.monotonic())
        if not future.done():
            future.cancel()
            raise FetchFailed(KIND_TIMEOUT, f"resolving {target.host} took too long")
        try:
            addresses = future.result()
        except OSError as exc:
            raise FetchFailed(
                KIND_NETWORK, f"cannot resolve {target.host}: {exc.strerror or exc}"
            ) from None
        if not addresses:
            raise FetchFailed(KIND_NETWORK, f"{target.host} has no address")
        return addresses

    def _decide(
        self,
        hop: _Hop,
        sent: tuple,
        addresses: list[str],
        names: list[str],
        deadline: float,
        fields: dict[str, Any],
    ) -> Decision:
        attempt = self._attempt
        document = {
            "method": hop.method,
            "url": hop.target.url,
            "url_parsed": hop.target.parsed_json(),
            "headers": as_object(sent),
            "body_bytes": len(hop.body or b""),
            "addresses": list(addresses),
            "addresses_global": addresses_global(addresses),
            "credentials": names,
            "redirect": None
            if hop.redirect_from is None
            else {"hop": hop.number, "from": hop.redirect_from},
            "invocation": attempt.invocation.to_json(),
        }
        runner = attempt.gate.policy_runner
        future, timeout_seconds = runner.start(document, deadline - time.monotonic())
        try:
            self._wait(future, timeout_seconds)
        except FetchFailed as exc:
            future.cancel()
            self._record(decision=DECISION_REFUSED, reason=exc.message, error=exc.message, **fields)
            raise
        return runner.outcome(future, timeout_seconds)

    def _send(
        self,
        hop: _Hop,
        sent: tuple,
        attached: dict[str, EgressCredential],
        addresses: list[str],
        deadline: float,
        fields: dict[str, Any],
    ) -> tuple[FetchResponse, str | None]:
        gate = self._attempt.gate
        watch = SocketWatch()
        with self._lock:
            self._watches.append(watch)
            if self._abort_kind is not None:
                watch.abort()
        pin = Pin(addresses, hop.target.port, watch)
        remaining = max(0.001, deadline - time.monotonic())
        connection = open_connection(
            hop.target.scheme, hop.target.host, pin, remaining, gate.tls_context
        )
        wire = urllib3.HTTPHeaderDict()
        for name, value in sent:
            wire.add(name, value)
        for header, credential in attached.items():
            wire.add(header, credential.value.reveal())
        status: int | None = None
        received = 0
        response: Any = None
        try:
            connection.request(
                hop.method,
                hop.target.request_target,
                body=hop.body,
                headers=wire,
                preload_content=False,
                decode_content=True,
                enforce_content_length=True,
            )
            response = connection.getresponse()
            status = response.status
            location = self._redirect_location(response, hop)
            body = self._read_body(response, hop.method)
            received = len(body)
            headers = tuple((name.lower(), value) for name, value in response.headers.items())
            _refuse_echo(attached, body, headers)
        except FetchFailed as exc:
            self._record(
                decision=DECISION_ALLOW,
                address=pin.connected_address,
                status=status,
                error=exc.message,
                response_bytes=received,
                **fields,
            )
            raise
        except (OSError, HTTPError, HTTPException, Aborted, ValueError) as exc:
            failure = self._network_failure(exc, pin)
            self._record(
                decision=DECISION_ALLOW,
                address=pin.connected_address,
                status=status,
                error=failure.message,
                **fields,
            )
            raise failure from None
        finally:
            # The response holds a file over the socket: the descriptor is released only when
            # both are closed.
            if response is not None:
                response.close()
            connection.close()
        self._record(
            decision=DECISION_ALLOW,
            address=pin.connected_address,
            status=status,
            response_bytes=received,
            **fields,
        )
        return (
            FetchResponse(
                status=status,
                status_text=str(response.reason or ""),
                url=hop.target.url,
                headers=headers,
                body=body,
                redirected=hop.number > 0,
            ),
            location,
        )

    def _redirect_location(self, response: Any, hop: _Hop) -> str | None:
        if response.status not in REDIRECT_STATUSES:
            return None
        location = response.headers.get("location")
        if location is None:
            return None
        mode = self._request.redirect
        if mode == REDIRECT_ERROR:
            raise FetchFailed(
                KIND_REFUSED,
                f"the response is a redirect ({response.status}) and redirect is 'error'",
            )
        return location if mode == REDIRECT_FOLLOW else None

    def _read_body(self, response: Any, method: str) -> bytes:
        limit = self._attempt.gate.settings.max_response_bytes
        declared = response.headers.get("content-length")
        # A HEAD's (or a 304's) Content-Length describes a body that is not sent.
        bodiless = method == "HEAD" or response.status in (204, 304)
        if (
            not bodiless
            and declared is not None
            and declared.strip().isdigit()
            and int(declared) > limit
        ):
            raise FetchFailed(
                KIND_TOO_LARGE,
                f"the response is {int(declared)} bytes (Content-Length), more than "
                f"egress.max_response_bytes ({limit})",
            )
        chunks: list[bytes] = []
        total = 0
        for chunk in response.stream(READ_CHUNK_BYTES, decode_content=True):
            total += len(chunk)
            if total > limit:
                raise FetchFailed(
                    KIND_TOO_LARGE,
                    f"the response is more than egress.max_response_bytes ({limit} bytes)",
                )
            chunks.append(chunk)
        return b"".join(chunks)

    def _network_failure(self, exc: BaseException, pin: Pin) -> FetchFailed:
        if self._abort_kind is not None:
            return self._abort_error()
        where = pin.connected_address or "/".join(pin.addresses)
        cause: BaseException | None = exc
        while cause is not None:  # urllib3 wraps the OS and TLS errors
            if isinstance(cause, ssl.SSLCertVerificationError):
                return FetchFailed(
                    KIND_NETWORK, f"TLS certificate rejected: {cause.verify_message}"
                )
            if isinstance(cause, ssl.SSLError):
                return FetchFailed(KIND_NETWORK, f"TLS failed: {cause.reason or 'handshake'}")
            if isinstance(cause, ConnectionRefusedError):
                return FetchFailed(KIND_NETWORK, f"connection refused by {where}")
            if isinstance(cause, TimeoutError):  # the socket's own bound, at the same deadline
                return FetchFailed(KIND_TIMEOUT, f"{self._timeout_message} from {where}")
            cause = cause.__cause__ or cause.__context__
        if isinstance(exc, HTTPError | HTTPException):
            return FetchFailed(
                KIND_NETWORK, f"the response from {where} is not valid HTTP ({type(exc).__name__})"
            )
        if isinstance(exc, OSError):
            return FetchFailed(KIND_NETWORK, f"network error with {where}: {exc.strerror or exc}")
        return FetchFailed(KIND_NETWORK, f"request to {where} failed ({type(exc).__name__})")

    # -- helpers --

    def _wait(self, future: Future[Any], timeout_seconds: float) -> None:
        """Wait for ``future`` at most ``timeout_seconds``; FetchFailed when aborted first."""
        done = threading.Event()
        future.add_done_callback(lambda _: done.set())
        with self._lock:
            if self._abort_kind is not None:
                raise self._abort_error()
            self._waiters.add(done)
        try:
            done.wait(max(0.0, timeout_seconds))
        finally:
            with self._lock:
                self._waiters.discard(done)
        if self._abort_kind is not None:
            raise self._abort_error()

    def _abort_error(self) -> FetchFailed:
        if self._abort_kind == KIND_TIMEOUT:
            return FetchFailed(KIND_TIMEOUT, self._abort_message)
        return FetchAborted(self._abort_message)

    def _record(self, *, started: float, **fields: Any) -> None:
        fields.setdefault("hop", 0)
        ms = max(0, round((time.monotonic() - started) * 1000))
        self._attempt.add_record(make_record(n=self.ordinal, ms=ms, **fields))


def _method(method: object) -> str:
    if not isinstance(method, str) or not method or len(method) > METHOD_BYTES_MAX:
        raise refused("the method must be a short HTTP token")
    if any(char not in _TOKEN for char in method):
        raise refused(f"{method[:METHOD_BYTES_MAX]!r} is not a valid HTTP method")
    upper = method.upper()
    if upper in REFUSED_METHODS:
        raise refused(f"the {upper} method is not allowed")
    return upper if upper in NORMALIZED_METHODS else method


def _refuse_echo(
    attached: dict[str, EgressCredential], body: bytes, headers: tuple[tuple[str, str], ...]
) -> None:
    """FetchFailed when the response holds a credential value sent with the request."""
    if not attached:
        return
    header_bytes = "\n".join(value for _, value in headers).encode("latin-1", "replace")
    for credential in attached.values():
        for piece in credential.echo_pieces():
            if piece in body or piece in header_bytes:
                raise FetchFailed(
                    KIND_CREDENTIAL_ECHO,
                    f"the response holds the value of credential {credential.name}, which the "
                    "worker attached: refused (never point a credential at an echo endpoint)",
                )
