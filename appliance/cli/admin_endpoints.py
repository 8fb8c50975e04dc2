"""Which management listener an ``admin`` command goes to: several endpoints, one owner.

``--addr`` (``host:port``, or ``https://host:port`` for a listener that serves TLS) may be
repeated (or ``$APPLIANCE_MANAGEMENT_ADDR`` holds a comma-separated list, like
``etcdctl --endpoints``); each must be loopback, like the listener itself — a remote voter is
reached through a forward to its own loopback listener (docs/management.md). ``send`` tries the
endpoints in order and moves to the next ONLY when the answer proves the command was not taken:

- a definite connection-establishment failure (``ConnectFailed``: nothing was sent);
- HTTP 409 ``not_owner`` (this voter is not the acquired owner; not applied). The 409 names the
  owner (``leader_hint``) and, once the voters have told each other (their Raft status), the
  owner's listener (``owner_management_addr``): when that is one of the endpoints given, it is
  asked next (and asked once more if it already said not-owner: ownership moved meanwhile);
  when it is none of them, the error says which address to give.

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
    waiting = list(bases)
    said_not_owner: set[str] = set()
    named: dict[str, Any] | None = None  # the last 409 that named the owner's listener
    owner_retried = False
    while waiting:
        base = waiting.pop(0)
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
        if not _is_not_owner(status, reply):
            return Sent(status, reply, base, skipped)
        skipped.append(f"{base}: not the owner{_hint_suffix(reply)}")
        last_not_owner = Sent(status, reply, base, list(skipped))
        said_not_owner.add(base)
        if reply.get("owner_management_addr"):
            named = reply
        owner = owner_base(reply, bases, answered_by=base)
        if owner is None:
            continue
        if owner in waiting:  # the owner's listener is given: ask it next
            waiting.remove(owner)
            waiting.insert(0, owner)
        elif owner in said_not_owner and not owner_retried:  # ownership moved meanwhile
            owner_retried = True
            waiting.insert(0, owner)
    if last_not_owner is not None:
        last_not_owner.skipped = skipped
        last_not_owner.reply = _with_owner_listener(last_not_owner.reply, named)
        return last_not_owner
    raise Failed(
        "cannot reach any management listener; nothing was sent (" + "; ".join(skipped) + ")"
    )


def _with_owner_listener(reply: dict[str, Any], named: dict[str, Any] | None) -> dict[str, Any]:
    """The last 409, with where the owner's listener is when an earlier one said it (for the
    same owner) and this one does not: the error then names it."""
    if named is None or reply.get("owner_management_addr"):
        return reply
    if reply.get("leader_hint") not in (None, named.get("leader_hint")):
        return reply
    keys = ("leader_hint", "leader_host", "owner_management_addr")
    return {**reply, **{key: named[key] for key in keys if named.get(key)}}


def _same_listener(addr: str) -> str | None:
    """``addr`` as the base URL ``endpoints`` makes of it, or None when it is not one."""
    try:
        return endpoints([addr])[0]
    except UsageError:
        return None


def owner_base(reply: dict[str, Any], bases: Sequence[str], answered_by: str) -> str | None:
    """The endpoint among ``bases`` that is the owner's listener, by the 409's
    ``owner_management_addr``; None when none is. A voter naming its own address as the owner's
    is on another machine than the owner (each listener is loopback on its own machine)."""
    url = _owner_url(reply)
    if url is None or url == answered_by or url not in bases or not _owner_may_be_here(reply):
        return None
    return url


def _owner_url(reply: dict[str, Any]) -> str | None:
    addr = reply.get("owner_management_addr")
    return _same_listener(addr) if isinstance(addr, str) else None


def _owner_may_be_here(reply: dict[str, Any]) -> bool:
    """Whether the owner's loopback listener can be this machine's: not when the owner
    advertises a host that is not loopback (its listener is loopback on that host)."""
    host = reply.get("leader_host")
    return not isinstance(host, str) or is_loopback_host(host)


def _hint_suffix(reply: dict[str, Any]) -> str:
    hint = reply.get("leader_hint")
    if not hint:
        return ""
    host = reply.get("leader_host")
    return f" (owner: {hint}{f' at {host}' if host else ''})"


def owner_advice(reply: dict[str, Any], bases: Sequence[str] = ()) -> str:
    """What to do after every endpoint said not-owner: name the owner and how to reach it."""
    hint = reply.get("leader_hint")
    if not hint:
        return (
            "no endpoint is the acquired owner and none knows one (an election may be running): "
            "try again shortly, or add every voter's listener with --addr"
        )
    host = reply.get("leader_host")
    addr = reply.get("owner_management_addr")
    url = _owner_url(reply)
    if url is not None and url in bases and _owner_may_be_here(reply):
        return (
            f"the acquired owner is {hint}, whose listener {addr} was given, but it did not "
            "take the command as the owner either (ownership is moving): try again shortly"
        )
    if url is not None and host is not None and is_loopback_host(host):
        # Every voter on this machine: the owner's listener is reachable as it is.
        return (
            f"the acquired owner is {hint}, whose management listener is {addr}; none of the "
            f"addresses given is it: add --addr {addr} (or put it in {ADDR_ENV})"
        )
    if url is not None and host is not None:
        port = url.rsplit(":", 1)[1]
        local = _free_looking_port(int(port), bases)
        scheme = "https://" if url.startswith("https://") else ""
        return (
            f"the acquired owner is {hint} on {host}; its management listener is {addr} there, "
            f"loopback-only: forward it (e.g. `ssh -N -L {local}:127.0.0.1:{port} {host}`) and "
            f"add --addr {scheme}127.0.0.1:{local}"
        )
    if url is not None:
        return (
            f"the acquired owner is {hint}, whose management listener is {addr} on its own "
            f"machine: add --addr {addr} when that is this machine, or forward it with SSH"
        )
    where = f" (advertise host {host})" if host else ""
    forward = f"ssh -N -L 4602:127.0.0.1:4601 {host}" if host else "an SSH forward to that voter"
    return (
        f"the acquired owner is {hint}{where}, and no --addr given is its listener; its "
        f"listener is loopback-only on its own machine: forward it (e.g. `{forward}`, using "
        "its management port) and add --addr 127.0.0.1:4602"
    )


def _free_looking_port(port: int, bases: Sequence[str]) -> int:
    """A local port for a forward: the owner's own, unless one of ``bases`` uses it here."""
    used = {base.rsplit(":", 1)[1] for base in bases}
    local = port
    while str(local) in used and local < 65535:
        local += 1
    return local
