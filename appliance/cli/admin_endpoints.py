"""Which management listener an ``admin`` command goes to: several endpoints, one owner.

``--addr`` (``host:port``, or ``https://host:port`` for a listener that serves TLS) may be
repeated (or ``$APPLIANCE_MANAGEMENT_ADDR`` holds a comma-separated list, like
``etcdctl --endpoints``); each must be loopback, like the listener itself — a remote voter is
reached through a forward to its own loopback listener (docs/management.md). ``send`` tries the
endpoints in order and moves to the next ONLY when the answer proves the command was not taken:

- a definite connection-establishment failure (``ConnectFailed``: nothing was sent);
- HTTP 409 ``not_owner`` (this voter is not the acquired owner; not applied).

Anything else ends the walk: a reply (success, a definite refusal, 503), or an ambiguous send —
the request may have been received, so it is reported as uncertain and never re-sent (creation
has no deduplication). Commands are never forwarded over the cluster port.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from appliance.config.addresses import AddressError, is_loopback_host, parse_host_port
from appliance.config.loopback import MANAGEMENT_ADDR_ENV
from appliance.http import AmbiguousSend, ConnectFailed, HttpClient

ADDR_ENV: Final = MANAGEMENT_ADDR_ENV
ADDR_DEFAULT: Final = "127.0.0.1:4601"
ENDPOINTS_MAX: Final = 16


class UsageError(Exception):
    """Invalid input: nothing was sent."""


class Failed(Exception):
    """The request failed before a reply could be read; the message says what was (not) sent."""


def endpoints(addrs: str | Sequence[str] | None, environ: Any = None) -> list[str]:
    """The base URLs to try, in order, from ``--addr`` values (or the environment, or default)."""
    env = os.environ if environ is None else environ
    if addrs is None or (not isinstance(addrs, str) and len(addrs) == 0):
        raw = [a for a in env.get(ADDR_ENV, "").split(",") if a.strip()] or [ADDR_DEFAULT]
    elif isinstance(addrs, str):
        raw = [a for a in addrs.split(",") if a.strip()]
    else:
        raw = [a for value in addrs for a in value.split(",") if a.strip()]
    if len(raw) > ENDPOINTS_MAX:
        raise UsageError(f"--addr: at most {ENDPOINTS_MAX} endpoints, got {len(raw)}")
    urls: list[str] = []
    for addr in raw:
        addr, scheme = addr.strip(), "http"
        for prefix in ("https://", "http://"):  # https:// for a listener that serves TLS
            if addr.startswith(prefix):
                scheme, addr = prefix[:-3], addr.removeprefix(prefix)
        try:
            parsed = parse_host_port(addr)
        except AddressError as exc:
            raise UsageError(f"--addr: {exc}") from None
        if not is_loopback_host(parsed.host):
            raise UsageError(
                f"--addr must be a loopback address (the listener is loopback-only), got {addr}; "
                "reach a remote voter through a forward to its loopback listener "
                "(docs/management.md)"
            )
        url = f"{scheme}://{parsed}"
        if url not in urls:
            urls.append(url)
    return urls


@dataclass
class Sent:
    """The reply that ended the walk, where it came from, and what was skipped on the way."""

    status: int
    reply: dict[str, Any]
    base: str
    skipped: list[str] = field(default_factory=list)


def _is_not_owner(status: int, reply: dict[str, Any]) -> bool:
    error = reply.get("error") if isinstance(reply.get("error"), dict) else {}
    return status == 409 and error.get("code") == "not_owner"


def call(
    client: HttpClient, base: str, token: str, method: str, path: str, body: bytes | None
) -> tuple[int, dict[str, Any]]:
    """One request to one endpoint; ``ConnectFailed`` passes through, ``AmbiguousSend`` too."""
    headers = {"Content-Type": "application/json"} if body is not None else None
    response = client.request(method, base + path, body=body, headers=headers, bearer=token)
    try:
        reply = response.json()
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        raise Failed(f"unexpected HTTP {response.status} reply from {base}")
    return response.status, reply


def send(
    client: HttpClient,
    bases: Sequence[str],
    token: str,
    method: str,
    path: str,
    body: bytes | None,
) -> Sent:
    """Walk ``bases`` until one answers with something other than not-owner (see module doc)."""
    skipped: list[str] = []
    last_not_owner: Sent | None = None
    for base in bases:
        try:
            status, reply = call(client, base, token, method, path, body)
        except ConnectFailed as exc:
            skipped.append(f"{base}: cannot connect ({exc.reason})")
            continue
        except AmbiguousSend as exc:
            raise Failed(
                f"the request to {base} may have been received ({exc.reason}); its outcome is "
                "uncertain and it was NOT re-sent: inspect state with 'appliance admin status' "
                "and 'list'"
            ) from None
        if _is_not_owner(status, reply):
            skipped.append(f"{base}: not the owner{_hint_suffix(reply)}")
            last_not_owner = Sent(status, reply, base, list(skipped))
            continue
        return Sent(status, reply, base, skipped)
    if last_not_owner is not None:
        last_not_owner.skipped = skipped
        return last_not_owner
    raise Failed(
        "cannot reach any management listener; nothing was sent (" + "; ".join(skipped) + ")"
    )


def _hint_suffix(reply: dict[str, Any]) -> str:
    hint = reply.get("leader_hint")
    if not hint:
        return ""
    host = reply.get("leader_host")
    return f" (owner: {hint}{f' at {host}' if host else ''})"


def owner_advice(reply: dict[str, Any]) -> str:
    """What to do after every endpoint said not-owner: name the owner and how to reach it."""
    hint = reply.get("leader_hint")
    if not hint:
        return (
            "no endpoint is the acquired owner and none knows one (an election may be running): "
            "try again shortly, or add every voter's listener with --addr"
        )
    host = reply.get("leader_host")
    where = f" (advertise host {host})" if host else ""
    forward = f"ssh -N -L 4602:127.0.0.1:4601 {host}" if host else "an SSH forward to that voter"
    return (
        f"the acquired owner is {hint}{where}, and no --addr given is its listener; its "
        f"listener is loopback-only on its own machine: forward it (e.g. `{forward}`, using "
        "its management port) and add --addr 127.0.0.1:4602"
    )
