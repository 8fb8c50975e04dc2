"""The egress gate against loopback HTTP servers written here: every rule of one fetch.

Each test builds a gate over a real Rego policy (regopy) and real sockets; only DNS is replaced
where a test needs a name to resolve to a chosen address (rebinding, TLS names)."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import pytest

from appliance.egress.headers import HEADER_BYTES_MAX, HEADERS_MAX
from appliance.egress.model import (
    KIND_ABORTED,
    KIND_CREDENTIAL_ECHO,
    KIND_REFUSED,
    KIND_TIMEOUT,
    KIND_TOO_LARGE,
    EgressDenied,
    FetchAborted,
    FetchFailed,
    FetchRequest,
)
from tests.egress.conftest import (
    ALLOW_ALL,
    INVOCATION,
    attempt_of,
    credential,
    fetch,
    make_gate,
    rego,
)
from tests.egress.target_server import TargetServer
from tests.support import wait_for

SECRET = "Bearer hook-secret-7f3a9c"


def echoed(response: Any) -> dict[str, Any]:
    return json.loads(response.body)


# -- allowed, denied, headers ------------------------------------------------------------------


def test_an_allowed_request_carries_the_idempotency_and_fencing_headers(
    target: TargetServer,
) -> None:
    attempt = attempt_of(make_gate())
    response = fetch(
        attempt,
        target.url("/echo/x?a=1"),
        method="post",
        headers=(("Content-Type", "application/json"),),
        body=b'{"k": 1}',
    )
    assert (response.status, response.status_text, response.redirected) == (200, "OK", False)
    assert response.url == target.url("/echo/x?a=1")
    assert response.header("content-type") == "application/json"
    seen = echoed(response)
    assert seen["method"] == "POST" and seen["query"] == "a=1" and seen["body"] == '{"k": 1}'
    assert seen["headers"]["idempotency-key"] == "ops/3/17/1"
    assert seen["headers"]["appliance-invocation"] == "ops/3/17/2"
    assert seen["headers"]["appliance-ownership-epoch"] == "9"
    assert seen["headers"]["content-type"] == "application/json"


def test_the_idempotency_key_counts_fetch_calls_in_the_order_they_were_made(
    target: TargetServer,
) -> None:
    attempt = attempt_of(make_gate())
    exchanges = [attempt.prepare(FetchRequest(target.url(f"/echo/{i}"))) for i in range(3)]
    for exchange in reversed(exchanges):  # run out of order, as concurrent promises may
        exchange.run()
    arrived = {a.path: a.headers["idempotency-key"] for a in target.requests}
    assert arrived == {"/echo/0": "ops/3/17/1", "/echo/1": "ops/3/17/2", "/echo/2": "ops/3/17/3"}
    assert [a.path for a in target.requests] == ["/echo/2", "/echo/1", "/echo/0"]


def test_a_retry_of_the_occurrence_repeats_the_keys_and_changes_the_invocation(
    target: TargetServer,
) -> None:
    gate = make_gate()
    first = gate.open_attempt(INVOCATION, time.monotonic() + 10)
    second = gate.open_attempt(
        type(INVOCATION)(**{**INVOCATION.to_json(), "attempt": 3}), time.monotonic() + 10
    )
    a, b = echoed(fetch(first, target.url("/echo"))), echoed(fetch(second, target.url("/echo")))
    assert a["headers"]["idempotency-key"] == b["headers"]["idempotency-key"] == "ops/3/17/1"
    assert a["headers"]["appliance-invocation"] == "ops/3/17/2"
    assert b["headers"]["appliance-invocation"] == "ops/3/17/3"


def test_a_script_may_replace_the_idempotency_key(target: TargetServer) -> None:
    attempt = attempt_of(make_gate())
    seen = echoed(fetch(attempt, target.url("/echo"), headers=(("Idempotency-Key", "mine-1"),)))
    assert seen["headers"]["idempotency-key"] == "mine-1"
    assert seen["headers"]["appliance-invocation"] == "ops/3/17/2"


@pytest.mark.parametrize(
    "header",
    [
        "Appliance-Invocation",
        "appliance-ownership-epoch",
        "Host",
        "Content-Length",
        "Transfer-Encoding",
        "Connection",
        "Proxy-Authorization",
    ],
)
def test_a_script_may_not_set_the_fencing_or_framing_headers(
    target: TargetServer, header: str
) -> None:
    attempt = attempt_of(make_gate())
    with pytest.raises(FetchFailed) as caught:
        fetch(attempt, target.url("/echo"), headers=((header, "x"),))
    assert caught.value.kind == KIND_REFUSED and header.lower() in caught.value.message
    assert target.requests == []
    (record,) = attempt.report()["requests"]
    assert record["decision"] == "refused"


@pytest.mark.parametrize("value", ["a\r\nInjected: 1", "a\nb", "nul\x00", "tab\x0bx", "snow☃"])
def test_header_values_with_control_or_non_latin1_characters_are_refused(
    target: TargetServer, value: str
) -> None:
    with pytest.raises(FetchFailed, match="control character"):
        fetch(attempt_of(make_gate()), target.url("/echo"), headers=(("X-Thing", value),))
    assert target.requests == []


def test_header_count_limit_at_the_boundary(target: TargetServer) -> None:
    attempt = attempt_of(make_gate())
    at_limit = tuple((f"x-h{i}", "v") for i in range(HEADERS_MAX))
    fetch(attempt, target.url("/echo"), headers=at_limit)
    with pytest.raises(FetchFailed, match=f"at most {HEADERS_MAX} headers"):
        fetch(attempt, target.url("/echo"), headers=(*at_limit, ("x-one-more", "v")))


def test_header_bytes_limit_at_the_boundary(target: TargetServer) -> None:
    attempt = attempt_of(make_gate())
    name = "x-big"
    exact = "v" * (HEADER_BYTES_MAX - len(name) - 4)
    fetch(attempt, target.url("/echo"), headers=((name, exact),))
    with pytest.raises(FetchFailed, match="exceed"):
        fetch(attempt, target.url("/echo"), headers=((name, exact + "v"),))


def test_a_denied_request_names_the_policys_reason_and_sends_nothing(
    target: TargetServer,
) -> None:
    attempt = attempt_of(make_gate())
    with pytest.raises(EgressDenied) as caught:
        fetch(attempt, target.url("/deny?token=abc"))
    assert caught.value.reason == "the path /deny is not for scripts"
    assert "the path /deny is not for scripts" in caught.value.message
    assert target.requests == []
    (record,) = attempt.report()["requests"]
    assert record["decision"] == "deny"
    assert record["reason"] == "the path /deny is not for scripts"
    assert record["url"] == target.url("/deny")  # never the query
    assert record["status"] is None and record["address"] is None


def test_the_policy_sees_the_request_as_it_will_be_sent(target: TargetServer) -> None:
    policy = rego()
    attempt = attempt_of(make_gate(policy))
    fetch(
        attempt,
        target.url("/echo/p?q=1#frag"),
        method="PUT",
        headers=(("X-Trace", "t1"), ("x-trace", "t2")),
        body=b"12345",
    )
    (seen,) = policy.inputs
    assert seen["method"] == "PUT"
    assert seen["url"] == target.url("/echo/p?q=1")
    assert seen["url_parsed"] == {
        "scheme": "http",
        "host": "127.0.0.1",
        "port": target.port,
        "path": "/echo/p",
        "query": "q=1",
    }
    assert seen["headers"]["x-trace"] == "t1, t2"
    assert seen["headers"]["idempotency-key"] == "ops/3/17/1"
    assert all(name == name.lower() for name in seen["headers"])
    assert seen["body_bytes"] == 5
    assert seen["addresses"] == ["127.0.0.1"] and seen["addresses_global"] is False
    assert seen["invocation"] == INVOCATION.to_json()
    assert seen["redirect"] is None and seen["credentials"] == []


# -- credentials -------------------------------------------------------------------------------


def test_a_credential_is_attached_and_the_policy_sees_only_its_name(
    target: TargetServer,
) -> None:
    policy = rego()
    gate = make_gate(policy, credentials=[credential(target.origin, SECRET, prefix="/status")])
    attempt = attempt_of(gate)
    fetch(attempt, target.url("/status/204"))  # /status does not echo (see the echo test)
    assert target.requests[-1].headers["authorization"] == SECRET
    (seen,) = policy.inputs
    assert seen["credentials"] == ["HOOK_TOKEN"]
    assert "authorization" not in seen["headers"]
    assert SECRET not in json.dumps(seen)
    assert attempt.report()["requests"][0]["credentials"] == ["HOOK_TOKEN"]
    assert SECRET not in json.dumps(attempt.report())


def test_an_echoed_credential_is_refused_so_the_script_never_holds_it(
    target: TargetServer,
) -> None:
    gate = make_gate(credentials=[credential(target.origin, SECRET)])
    attempt = attempt_of(gate)
    for path in ("/echo", "/reflect/authorization"):
        with pytest.raises(FetchFailed) as caught:
            fetch(attempt, target.url(path))
        assert caught.value.kind == KIND_CREDENTIAL_ECHO
        assert "HOOK_TOKEN" in caught.value.message and SECRET not in caught.value.message
    assert SECRET not in json.dumps(attempt.report())


@pytest.mark.parametrize(
    ("path", "attached"),
    [
        ("/hooks", True),
        ("/hooks/x", True),
        ("/hooks/x/y", True),
        ("/hooksx", False),
        ("/other/hooks", False),
        ("/hooks/../admin", False),
        ("/hooks/%2e%2e/admin", False),
        ("/hooks/x%2F..%2F..%2Fadmin", False),
    ],
)
def test_credentials_match_the_path_prefix_at_segment_boundaries(
    target: TargetServer, path: str, attached: bool
) -> None:
    rule = credential(target.origin, "k-123", prefix="/hooks", header="X-Key")
    fetch(attempt_of(make_gate(credentials=[rule])), target.url(path))
    assert ("x-key" in target.requests[-1].headers) is attached


def test_a_credential_never_goes_to_another_origin(target: TargetServer) -> None:
    other = TargetServer()
    try:
        gate = make_gate(credentials=[credential(target.origin, "k-123", header="X-Key")])
        attempt = attempt_of(gate)
        fetch(attempt, other.url("/status/204"))
        fetch(attempt, target.url("/status/204"))
        assert "x-key" not in other.requests[-1].headers
        assert target.requests[-1].headers["x-key"] == "k-123"
    finally:
        other.close()


def test_a_script_may_not_set_a_header_a_credential_sets(target: TargetServer) -> None:
    gate = make_gate(credentials=[credential(target.origin, SECRET)])
    attempt = attempt_of(gate)
    with pytest.raises(FetchFailed, match="may not set the authorization header"):
        fetch(attempt, target.url("/echo"), headers=(("Authorization", "Bearer mine"),))
    assert target.requests == []
    other = TargetServer()
    try:  # elsewhere, the script's own Authorization is its business
        fetch(attempt, other.url("/status/204"), headers=(("Authorization", "Bearer mine"),))
        assert other.requests[-1].headers["authorization"] == "Bearer mine"
    finally:
        other.close()


# -- redirects ---------------------------------------------------------------------------------


def redirect_to(server: TargetServer, to: str, code: int = 302) -> str:
    from urllib.parse import quote

    return server.url(f"/redirect?code={code}&to={quote(to, safe='')}")


def test_a_redirect_is_handed_back_unfollowed_by_default(target: TargetServer) -> None:
    attempt = attempt_of(make_gate())
    response = fetch(attempt, redirect_to(target, target.url("/echo/next")))
    assert response.status == 302 and response.header("location") == target.url("/echo/next")
    assert [a.path.split("?")[0] for a in target.requests] == ["/redirect"]
    (record,) = attempt.report()["requests"]
    assert record["status"] == 302 and record["decision"] == "allow"


def test_redirect_error_rejects(target: TargetServer) -> None:
    with pytest.raises(FetchFailed, match="redirect is 'error'"):
        fetch(attempt_of(make_gate()), redirect_to(target, target.url("/echo")), redirect="error")


def test_a_followed_redirect_asks_the_policy_again_for_the_hop(target: TargetServer) -> None:
    policy = rego()
    attempt = attempt_of(make_gate(policy))
    response = fetch(
        attempt,
        redirect_to(target, "/echo/next?z=1", 307),
        method="POST",
        body=b"keep",
        redirect="follow",
    )
    assert response.redirected and response.url == target.url("/echo/next?z=1")
    assert echoed(response)["body"] == "keep" and echoed(response)["method"] == "POST"
    assert [seen["redirect"] for seen in policy.inputs] == [
        None,
        {"hop": 1, "from": target.url("/redirect")},
    ]
    hops = attempt.report()["requests"]
    assert [(r["n"], r["hop"], r["status"]) for r in hops] == [(1, 0, 307), (1, 1, 200)]
    assert echoed(response)["headers"]["idempotency-key"] == "ops/3/17/1"


def test_a_redirect_hop_the_policy_denies_is_not_followed(target: TargetServer) -> None:
    attempt = attempt_of(make_gate())
    with pytest.raises(EgressDenied, match="not for scripts"):
        fetch(attempt, redirect_to(target, target.url("/deny")), redirect="follow")
    assert [a.path.split("?")[0] for a in target.requests] == ["/redirect"]
    assert [r["decision"] for r in attempt.report()["requests"]] == ["allow", "deny"]


def test_a_redirect_to_another_origin_drops_the_credential_and_the_scripts_authorization(
    target: TargetServer,
) -> None:
    other = TargetServer()
    try:
        gate = make_gate(credentials=[credential(target.origin, "k-123", header="X-Key")])
        attempt = attempt_of(gate)
        response = fetch(
            attempt,
            redirect_to(target, other.url("/echo")),
            redirect="follow",
            headers=(("Cookie", "c=1"), ("X-Other", "kept")),
        )
        assert target.requests[0].headers["x-key"] == "k-123"
        headers = echoed(response)["headers"]
        assert "x-key" not in headers and "cookie" not in headers
        assert headers["x-other"] == "kept"
        assert [r["credentials"] for r in attempt.report()["requests"]] == [["HOOK_TOKEN"], []]
    finally:
        other.close()


def test_a_303_becomes_a_get_without_body(target: TargetServer) -> None:
    attempt = attempt_of(make_gate())
    response = fetch(
        attempt,
        redirect_to(target, "/echo/after", 303),
        method="POST",
        body=b"x",
        headers=(("Content-Type", "text/plain"),),
        redirect="follow",
    )
    seen = echoed(response)
    assert seen["method"] == "GET" and seen["body"] == "" and "content-type" not in seen["headers"]


def test_max_redirects_at_the_boundary(target: TargetServer) -> None:
    attempt = attempt_of(make_gate(max_redirects=2))
    two = redirect_to(target, redirect_to(target, target.url("/echo")))
    assert fetch(attempt, two, redirect="follow").status == 200
    three = redirect_to(target, two)
    with pytest.raises(FetchFailed, match=r"more than 2 redirects \(egress.max_redirects\)"):
        fetch(attempt, three, redirect="follow")
    refused_hop = attempt.report()["requests"][-1]
    assert (refused_hop["hop"], refused_hop["decision"]) == (3, "refused")
    assert "egress.max_redirects" in refused_hop["reason"]


# -- limits ------------------------------------------------------------------------------------


def test_max_requests_at_the_boundary_and_hops_count(target: TargetServer) -> None:
    attempt = attempt_of(make_gate(max_requests=3))
    fetch(attempt, target.url("/status/204"))
    fetch(attempt, redirect_to(target, target.url("/status/204")), redirect="follow")  # 2 used
    with pytest.raises(FetchFailed) as caught:
        fetch(attempt, target.url("/status/204"))
    assert caught.value.kind == KIND_REFUSED
    assert "at most 3 requests per attempt (egress.max_requests)" in caught.value.message
    report = attempt.report()
    assert len(report["requests"]) == 3 and report["over_limit"] == 1
    assert len(target.requests) == 3


def test_request_body_limit_at_the_boundary(target: TargetServer) -> None:
    attempt = attempt_of(make_gate(max_request_bytes=1000))
    fetch(attempt, target.url("/echo"), method="POST", body=b"b" * 1000)
    with pytest.raises(
        FetchFailed, match=r"1001 bytes, more than egress.max_request_bytes \(1000\)"
    ):
        fetch(attempt, target.url("/echo"), method="POST", body=b"b" * 1001)
    assert len(target.requests) == 1


@pytest.mark.parametrize("route", ["bytes", "chunked"])
def test_response_limit_at_the_boundary_and_nothing_is_cut(
    target: TargetServer, route: str
) -> None:
    attempt = attempt_of(make_gate(max_response_bytes=20_000))
    assert len(fetch(attempt, target.url(f"/{route}/20000")).body) == 20_000
    with pytest.raises(FetchFailed) as caught:
        fetch(attempt, target.url(f"/{route}/20001"))
    assert caught.value.kind == KIND_TOO_LARGE
    assert "egress.max_response_bytes (20000" in caught.value.message
    record = attempt.report()["requests"][-1]
    assert record["status"] == 200 and "max_response_bytes" in record["error"]


def test_get_with_a_body_and_refused_methods(target: TargetServer) -> None:
    attempt = attempt_of(make_gate())
    with pytest.raises(FetchFailed, match="cannot have a body"):
        fetch(attempt, target.url("/echo"), body=b"x")
    for method in ("CONNECT", "trace", "GE T", ""):
        with pytest.raises(FetchFailed):
            fetch(attempt, target.url("/echo"), method=method)
    assert target.requests == []


@pytest.mark.parametrize(
    "url",
    [
        "ftp://127.0.0.1/",
        "file:///etc/passwd",
        "http://user:pw@127.0.0.1/",
        "/relative",
        "javascript:alert(1)",
        "http://127.0.0.1:0/",
    ],
)
def test_only_absolute_http_urls_without_userinfo(url: str) -> None:
    attempt = attempt_of(make_gate())
    with pytest.raises(FetchFailed) as caught:
        fetch(attempt, url)
    assert caught.value.kind == KIND_REFUSED


def test_prepare_never_raises_even_for_garbage() -> None:
    attempt = attempt_of(make_gate())
    exchange = attempt.prepare(FetchRequest(None, method=None, headers="x"))  # type: ignore[arg-type]
    with pytest.raises(FetchFailed):
        exchange.run()


# -- time, abort, close ------------------------------------------------------------------------


def test_a_slow_server_is_cut_at_the_request_timeout_and_sees_the_connection_closed(
    target: TargetServer,
) -> None:
    attempt = attempt_of(make_gate(request_timeout_ms=300))
    started = time.monotonic()
    with pytest.raises(FetchFailed) as caught:
        fetch(attempt, target.url("/hold"))
    took = time.monotonic() - started
    assert caught.value.kind == KIND_TIMEOUT and "300 ms" in caught.value.message
    assert 0.25 <= took < 5
    assert target.closed_by_client.wait(10)


def test_the_request_timeout_never_passes_the_attempts_deadline(target: TargetServer) -> None:
    attempt = attempt_of(make_gate(request_timeout_ms=30_000), seconds=0.4)
    started = time.monotonic()
    with pytest.raises(FetchFailed) as caught:
        fetch(attempt, target.url("/hold"))
    assert caught.value.kind == KIND_TIMEOUT
    assert time.monotonic() - started < 5


def test_a_dripping_server_cannot_outlive_the_deadline(target: TargetServer) -> None:
    # A byte every 0.1 s: each read is quick, only the request's deadline stops it.
    attempt = attempt_of(make_gate(request_timeout_ms=600))
    started = time.monotonic()
    with pytest.raises(FetchFailed) as caught:
        fetch(attempt, target.url("/drip"))
    assert caught.value.kind == KIND_TIMEOUT
    assert time.monotonic() - started < 5
    assert target.closed_by_client.wait(10)


def open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def run_in_thread(exchange: Any) -> tuple[threading.Thread, list[BaseException]]:
    failures: list[BaseException] = []

    def body() -> None:
        try:
            exchange.run()
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    return thread, failures


def test_abort_closes_the_connection_the_server_sees_it(target: TargetServer) -> None:
    attempt = attempt_of(make_gate())
    exchange = attempt.prepare(FetchRequest(target.url("/hold")))
    before = open_fds()
    thread, failures = run_in_thread(exchange)
    assert target.holding.wait(10)
    exchange.abort()
    thread.join(10)
    assert not thread.is_alive()
    assert isinstance(failures[0], FetchAborted) and failures[0].kind == KIND_ABORTED
    assert target.closed_by_client.wait(10)
    assert exchange.sockets_open == 0
    wait_for(lambda: open_fds() <= before, "the exchange's descriptors to close")
    (record,) = attempt.report()["requests"]
    assert record["decision"] == "allow" and record["error"] == "the request was aborted"


def test_close_aborts_everything_in_flight_and_confirms(target: TargetServer) -> None:
    attempt = attempt_of(make_gate())
    exchanges = [attempt.prepare(FetchRequest(target.url("/hold"))) for _ in range(3)]
    never_run = attempt.prepare(FetchRequest(target.url("/echo")))
    threads = [run_in_thread(exchange) for exchange in exchanges]
    wait_for(lambda: sum(1 for a in target.requests if a.path == "/hold") == 3, "three holds")
    assert attempt.close(10) is True
    for thread, failures in threads:
        thread.join(10)
        assert isinstance(failures[0], FetchAborted)
    assert attempt.in_flight == 0
    with pytest.raises(FetchAborted):
        never_run.run()
    with pytest.raises(FetchAborted, match="the attempt has ended"):
        fetch(attempt, target.url("/echo"))
    assert len(target.requests) == 3


def test_abort_during_connect_stops_it(target: TargetServer) -> None:
    # A listener whose backlog is full: the kernel drops further SYNs, so connect hangs.
    import socket

    stuck = socket.socket()
    stuck.bind(("127.0.0.1", 0))
    stuck.listen(0)
    port = stuck.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        attempt = attempt_of(make_gate(policy=rego(ALLOW_ALL)))
        exchange = attempt.prepare(FetchRequest(f"http://127.0.0.1:{port}/"))
        thread, failures = run_in_thread(exchange)
        time.sleep(0.3)  # let it reach connect(); the assertion below is on the abort
        started = time.monotonic()
        exchange.abort()
        thread.join(10)
        assert not thread.is_alive() and time.monotonic() - started < 5
        assert isinstance(failures[0], FetchFailed)
    finally:
        for filler in fillers:
            filler.close()
        stuck.close()


# -- addresses: resolve once, connect where the policy looked ------------------------------------


class FlippingResolver:
    """A name that answers 127.0.0.1 the first time and 127.0.0.2 afterwards (rebinding)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls += 1
        return ["127.0.0.1"] if self.calls == 1 else ["127.0.0.2"]


def test_dns_rebinding_cannot_move_the_connection(target: TargetServer) -> None:
    elsewhere = TargetServer(host="127.0.0.2", port=target.port)
    try:
        resolver = FlippingResolver()
        policy = rego()
        attempt = attempt_of(make_gate(policy, resolver=resolver))
        response = fetch(attempt, f"http://rebind.test:{target.port}/echo")
        assert response.status == 200
        assert resolver.calls == 1  # resolved once; urllib3 never resolved it again
        assert policy.inputs[0]["addresses"] == ["127.0.0.1"]
        assert target.requests[-1].local_address == "127.0.0.1"
        assert target.requests[-1].headers["host"] == f"rebind.test:{target.port}"
        assert elsewhere.requests == []
        with pytest.raises(EgressDenied, match="off limits"):  # the next answer is checked too
            fetch(attempt, f"http://rebind.test:{target.port}/echo")
        assert elsewhere.requests == []
    finally:
        elsewhere.close()


def test_a_name_that_does_not_resolve_fails_without_asking_the_policy() -> None:
    def nowhere(host: str, port: int) -> list[str]:
        raise OSError(-2, "Name or service not known")

    policy = rego()
    attempt = attempt_of(make_gate(policy, resolver=nowhere))
    with pytest.raises(FetchFailed, match=r"cannot resolve nowhere\.test"):
        fetch(attempt, "http://nowhere.test/")
    assert policy.inputs == []


# -- TLS: names stay names ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def authority() -> Any:
    from appliance.cluster_init.pki import new_authority

    return new_authority("egress test CA")


def tls_target(authority: Any, names: list[str]) -> TargetServer:
    import ssl
    import tempfile

    from appliance.cluster_init.pki import issue

    issued = issue(authority, names[0], dns_names=names)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory() as folder:
        cert, key = os.path.join(folder, "c.pem"), os.path.join(folder, "k.pem")
        with open(cert, "wb") as handle:
            handle.write(issued.cert_pem())
        with open(key, "wb") as handle:
            handle.write(issued.key_pem())
        context.load_cert_chain(cert, key)
    return TargetServer(tls=context)


def test_tls_checks_and_sni_stay_on_the_name_while_the_socket_goes_to_the_ip(
    authority: Any,
) -> None:
    server = tls_target(authority, ["egress-target.test"])
    try:
        gate = make_gate(
            resolver=lambda host, port: ["127.0.0.1"],
            ca_pem=authority.cert_pem().decode(),
        )
        response = fetch(attempt_of(gate), server.url("/echo", host="egress-target.test"))
        assert response.status == 200
        assert server.server_names == ["egress-target.test"]
        assert echoed(response)["headers"]["host"] == f"egress-target.test:{server.port}"
    finally:
        server.close()


def test_a_certificate_for_another_name_is_rejected(authority: Any) -> None:
    server = tls_target(authority, ["somebody-else.test"])
    try:
        gate = make_gate(
            resolver=lambda host, port: ["127.0.0.1"], ca_pem=authority.cert_pem().decode()
        )
        attempt = attempt_of(gate)
        with pytest.raises(FetchFailed, match="TLS certificate rejected"):
            fetch(attempt, server.url("/echo", host="egress-target.test"))
        assert server.requests == []
        assert "TLS certificate rejected" in attempt.report()["requests"][0]["error"]
    finally:
        server.close()


def test_an_unknown_authority_is_rejected_without_a_ca_file(authority: Any) -> None:
    server = tls_target(authority, ["egress-target.test"])
    try:
        gate = make_gate(resolver=lambda host, port: ["127.0.0.1"])
        with pytest.raises(FetchFailed, match="TLS certificate rejected"):
            fetch(attempt_of(gate), server.url("/echo", host="egress-target.test"))
    finally:
        server.close()


def test_proxy_variables_in_the_environment_are_ignored(
    target: TargetServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    assert fetch(attempt_of(make_gate()), target.url("/status/204")).status == 204


# -- the report --------------------------------------------------------------------------------


def test_records_are_streamed_as_they_are_final_and_match_the_report(
    target: TargetServer,
) -> None:
    streamed: list[dict[str, Any]] = []
    gate = make_gate()
    attempt = gate.open_attempt(INVOCATION, time.monotonic() + 10, on_record=streamed.append)
    fetch(attempt, target.url("/echo?x=1"), method="POST", body=b"abc")
    with pytest.raises(EgressDenied):
        fetch(attempt, target.url("/deny"))
    report = attempt.report()
    assert streamed == report["requests"]
    first = report["requests"][0]
    assert first["url"] == target.url("/echo") and first["method"] == "POST"
    assert first["request_bytes"] == 3 and first["response_bytes"] > 0
    assert first["address"] == "127.0.0.1" and first["status"] == 200 and first["ms"] >= 0
    assert report["over_limit"] == 0 and report["records_dropped"] == 0


def test_a_head_is_not_refused_for_the_length_of_a_body_it_does_not_get(
    target: TargetServer,
) -> None:
    attempt = attempt_of(make_gate(max_response_bytes=1000))
    response = fetch(attempt, target.url("/bytes/5000"), method="HEAD")
    assert (response.status, response.header("content-length"), response.body) == (
        200,
        "5000",
        b"",
    )


def test_a_server_that_does_not_speak_http_fails_the_fetch_cleanly() -> None:
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]

    def answer_garbage() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(b"SMTP ready\r\n\r\n")

    thread = threading.Thread(target=answer_garbage)
    thread.start()
    try:
        attempt = attempt_of(make_gate())
        with pytest.raises(FetchFailed, match="not valid HTTP") as caught:
            fetch(attempt, f"http://127.0.0.1:{port}/")
        assert caught.value.kind == "network"
        assert "not valid HTTP" in attempt.report()["requests"][0]["error"]
    finally:
        thread.join(10)
        listener.close()


def test_an_external_opa_decides_and_its_input_holds_no_credential_value(
    target: TargetServer,
) -> None:
    from tests.egress.fake_opa import FakeOpa

    opa = FakeOpa((200, {"result": {"allow": True}}))
    try:
        gate = make_gate(opa.policy(), credentials=[credential(target.origin, SECRET)])
        fetch(attempt_of(gate), target.url("/status/204"))
        assert target.requests[-1].headers["authorization"] == SECRET
        (seen,) = opa.inputs
        assert seen["credentials"] == ["HOOK_TOKEN"] and "authorization" not in seen["headers"]
        assert all(SECRET.encode() not in body for body in opa.raw_bodies)
        assert SECRET.split()[1].encode() not in opa.raw_bodies[0]
    finally:
        opa.close()


def test_an_external_opa_that_denies_stops_the_request(target: TargetServer) -> None:
    from tests.egress.fake_opa import FakeOpa

    opa = FakeOpa((200, {"result": {"allow": False, "reason": "opa says no"}}))
    try:
        with pytest.raises(EgressDenied, match="opa says no"):
            fetch(attempt_of(make_gate(opa.policy())), target.url("/status/204"))
        assert target.requests == []
    finally:
        opa.close()
