"""Asking the runners' admission route for a permit (SPEC §6, §7; docs/protocol.md).

Theory of operation: the admission URLs are tried in the configured order, each over a FRESH
connection (so a connection-establishment failure is definite: nothing was sent). Only two
outcomes move on to the next URL, because only they prove that this voter granted nothing:

- HTTP 409 (this voter is not the acquired owner), and
- ``ConnectFailed`` (the request never left).

Everything else stops the attempt and says why: 200 with a well-formed permit naming this
incarnation is a grant; 403 is a definite refusal; an ``AmbiguousSend`` (the request may have
been received and committed), any other status, or a 200 whose body is not a permit for this
incarnation is *uncertain*. When every URL answered 409 or could not be reached the attempt is
*unavailable*: no voter granted a permit to this request. The client never retries by itself and
neither does this module: one pass over the list, at most one request per URL.

The pass starts at the URL that last answered as the owner (anything but 409 or a connection
failure) and goes round the configured order from there: the owner rarely changes, and each 409
of a voter that is not the owner costs a round trip on the launch path. Which URL comes first
changes nothing above: the same answers move on, and each URL is still asked at most once.

The list can be replaced while the worker runs (``replace_urls``, on SIGHUP: docs/worker.md): a
pass already under way finishes over the list it started with, and the next pass uses the new
one, starting at the same owner's URL when the new list still holds it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Generator
from typing import Any, Final

from appliance.config.urls import Origin
from appliance.http.client import AmbiguousSend, ConnectFailed, HttpClient, Response
from appliance.protocol.v1 import ADMIT_PATH, PROTOCOL_VERSION, Binding, invocation_document
from appliance.secret import Secret
from appliance.worker.admission_result import AdmissionResult, Attempt

__all__ = ["ADMIT_PATH", "AdmissionClient", "AdmissionResult", "Attempt", "invocation_document"]

log = logging.getLogger("appliance.worker.admission")

Reply = Response | ConnectFailed | AmbiguousSend  # what one POST came to

PERMIT_RESPONSE_BYTES_MAX: Final = 64 * 1024


class AdmissionClient:
    """Requests permits for one worker incarnation from an ordered list of admission origins."""

    def __init__(
        self,
        urls: tuple[Origin, ...],
        bearer: Secret,
        incarnation_id: str,
        client: HttpClient,
        *,
        connect_timeout_ms: int = 2_000,
        read_timeout_ms: int = 15_000,
    ) -> None:
        if not urls:
            raise ValueError("at least one admission URL is required")
        self._urls = urls
        self._bearer = bearer
        self._incarnation_id = incarnation_id
        self._client = client
        self._connect_timeout_ms = connect_timeout_ms
        self._read_timeout_ms = read_timeout_ms
        self._first = 0  # index of the URL that last answered as the owner
        self._lock = threading.Lock()  # ``_urls`` and ``_first`` change together

    @property
    def urls(self) -> tuple[Origin, ...]:
        return self._urls

    def replace_urls(self, urls: tuple[Origin, ...]) -> None:
        """Use ``urls`` from the next pass on, keeping the owner's URL first if it is listed."""
        if not urls:
            raise ValueError("at least one admission URL is required")
        with self._lock:
            owner = self._urls[self._first] if self._first < len(self._urls) else None
            self._first = urls.index(owner) if owner in urls else 0
            self._urls = urls

    def _order(self) -> tuple[tuple[int, Origin], ...]:
        with self._lock:
            first, urls = self._first, self._urls
        indexed = tuple(enumerate(urls))
        return indexed[first:] + indexed[:first]

    def _answered_as_owner(self, index: int, origin: Origin) -> None:
        """Ask ``origin`` first next time, unless the list was replaced under this pass."""
        with self._lock:
            if index < len(self._urls) and self._urls[index] == origin:
                self._first = index

    def request_permit(self, binding: Binding, document: dict[str, Any]) -> AdmissionResult:
        """One pass over the URLs for ``binding``; ``document`` is the binding as received."""
        steps = self.permit_pass(binding, document)
        request = next(steps)
        while True:
            url, body = request
            reply: Reply
            try:
                reply = self._client.post(
                    url,
                    body,
                    headers={"Content-Type": "application/json"},
                    bearer=self._bearer,
                    fresh_connection=True,
                    connect_timeout_ms=self._connect_timeout_ms,
                    read_timeout_ms=self._read_timeout_ms,
                    response_bytes_max=PERMIT_RESPONSE_BYTES_MAX,
                )
            except (ConnectFailed, AmbiguousSend) as exc:
                reply = exc
            try:
                request = steps.send(reply)
            except StopIteration as done:
                return done.value

    def permit_pass(
        self, binding: Binding, document: dict[str, Any]
    ) -> Generator[tuple[str, bytes], Reply, AdmissionResult]:
        """The pass as decisions, without I/O: yields ``(url, body)`` to POST, is sent what
        came back (a ``Response``, or the ``ConnectFailed`` / ``AmbiguousSend`` raised), and
        returns the result. ``request_permit`` drives it over HTTP; the system simulator drives
        it over its simulated network."""
        body = json.dumps(
            {
                "protocol": PROTOCOL_VERSION,
                "binding": document,
                "incarnation": self._incarnation_id,
            },
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode("utf-8")
        attempts: list[Attempt] = []
        for index, origin in self._order():
            reply = yield (origin.url + ADMIT_PATH, body)
            if isinstance(reply, ConnectFailed):
                attempts.append(Attempt(origin.url, "connect_failed", reply.reason))
                continue  # definite: nothing was sent, the next voter may be the owner
            if isinstance(reply, AmbiguousSend):
                attempts.append(Attempt(origin.url, "ambiguous", reply.reason))
                return AdmissionResult(
                    "uncertain",
                    None,
                    f"ambiguous send to {origin.url}: {reply.reason}",
                    tuple(attempts),
                )
            if reply.status == 409:
                attempts.append(Attempt(origin.url, "409", _error_code(reply)))
                continue
            self._answered_as_owner(index, origin)  # ask this voter first next time
            return self._judge(origin, binding, reply, attempts)
        return AdmissionResult(
            "unavailable",
            None,
            "no admission URL granted a permit (every one answered 409 or was unreachable)",
            tuple(attempts),
        )

    def _judge(
        self, origin: Origin, binding: Binding, response: Response, attempts: list[Attempt]
    ) -> AdmissionResult:
        if response.status == 200:
            permit, problem = self._permit_of(response, invocation_document(binding.invocation))
            if permit is not None:
                attempts.append(Attempt(origin.url, "granted"))
                return AdmissionResult("granted", permit, "permit granted", tuple(attempts))
            attempts.append(Attempt(origin.url, "bad_permit", problem))
            return AdmissionResult(
                "uncertain",
                None,
                f"{origin.url} answered 200 without a usable permit: {problem}",
                tuple(attempts),
            )
        code = _error_code(response)
        if response.status == 403:
            attempts.append(Attempt(origin.url, "403", code))
            return AdmissionResult(
                "refused", None, f"{origin.url} refused admission ({code})", tuple(attempts)
            )
        attempts.append(Attempt(origin.url, f"status_{response.status}", code))
        return AdmissionResult(
            "uncertain",
            None,
            f"{origin.url} answered HTTP {response.status} ({code}); the outcome is not known",
            tuple(attempts),
        )

    def _permit_of(
        self, response: Response, expected_invocation: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, str]:
        try:
            document = response.json()
        except (UnicodeDecodeError, ValueError):
            return None, "the body is not JSON"
        if not isinstance(document, dict) or document.get("protocol") != PROTOCOL_VERSION:
            return None, f"the body is not a protocol {PROTOCOL_VERSION} document"
        permit = document.get("permit")
        if not isinstance(permit, dict):
            return None, "the body has no permit object"
        if permit.get("incarnation") != self._incarnation_id:
            return None, "the permit names another worker incarnation"
        if permit.get("invocation") != expected_invocation:
            return None, "the permit names another invocation"
        return permit, ""


def _error_code(response: Response) -> str:
    try:
        document = response.json()
        code = document["error"]["code"]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        return "no error code"
    return str(code)[:64]
