"""Origin rules for the URLs a runner or worker dials (SPEC §6 remote.url, §7 admission_urls).

Theory of operation: these URLs carry bearer credentials, so only an *origin* is accepted —
scheme, host and port — and everything that could smuggle a second meaning is refused: userinfo
(``user:pass@``, even empty), a path other than empty or ``/``, a query or fragment (even empty:
``http://h/?``), other schemes, a missing host. HTTPS may name any host; plain HTTP only a
loopback IP literal (see ``addresses.is_loopback_host``: ``localhost`` is refused because its
meaning depends on the resolver). The text is split by hand rather than with ``urllib`` because
``urlsplit`` is lenient (it accepts backslashes, whitespace and odd ports) and what we accept
must be exactly what we document. The result is a normalized ``Origin`` whose default port is
explicit, so ``https://H`` and ``https://h:443/`` are the same origin.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from appliance.config.addresses import (
    AddressError,
    bracket,
    is_loopback_host,
    parse_host,
    parse_port,
)
from appliance.core.schema import Problems, show, utf8_length

URL_BYTES_MAX: Final = 2048
DEFAULT_PORTS: Final = {"https": 443, "http": 80}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_FORBIDDEN_CHARS = re.compile(r"[\x00-\x20\x7f\\]")


class OriginError(ValueError):
    """A URL that breaks the origin rules; the message is safe to show."""


@dataclass(frozen=True, order=True)
class Origin:
    scheme: str
    host: str
    port: int

    @property
    def url(self) -> str:
        """The normalized origin, default port omitted (``https://example.org``)."""
        port = "" if DEFAULT_PORTS[self.scheme] == self.port else f":{self.port}"
        return f"{self.scheme}://{bracket(self.host)}{port}"

    def __str__(self) -> str:
        return self.url


def parse_origin(text: str, *, plain_http_anywhere: bool = False) -> Origin:
    """The ``Origin`` a URL names, by the rules above; ``OriginError`` naming what is wrong.

    ``plain_http_anywhere`` lifts only the loopback rule for ``http`` (etcd endpoints, whose
    documented rule lets an operator reach etcd over plain HTTP); the grammar is the same."""
    if utf8_length(text) is None or len(text.encode("utf-8", "replace")) > URL_BYTES_MAX:
        raise OriginError(f"must be a URL of at most {URL_BYTES_MAX} bytes")
    if _FORBIDDEN_CHARS.search(text):
        raise OriginError("must not contain whitespace, control characters or backslashes")
    match = _SCHEME.match(text)
    if match is None:
        raise OriginError(f"must be an https:// or http:// origin, got {show(text)}")
    scheme = match.group(1).lower()
    if scheme not in DEFAULT_PORTS:
        raise OriginError(f"scheme must be https or http, got {show(match.group(1))}")
    rest = text[match.end() :]
    if "?" in rest:
        raise OriginError("must not have a query")
    if "#" in rest:
        raise OriginError("must not have a fragment")
    authority, slash, path = rest.partition("/")
    if slash and path:
        raise OriginError(f"must not have a path other than '/', got {show('/' + path)}")
    if "@" in authority:
        raise OriginError("must not embed credentials (user:password@)")
    if not authority:
        raise OriginError("must name a host")
    host, port = _split_authority(authority, DEFAULT_PORTS[scheme])
    if scheme == "http" and not plain_http_anywhere and not is_loopback_host(host):
        raise OriginError(
            f"plain http is only allowed for a loopback IP (127.0.0.0/8 or [::1]), got host "
            f"{show(host)}; use https"
        )
    return Origin(scheme, host, port)


def _split_authority(authority: str, default_port: int) -> tuple[str, int]:
    try:
        if authority.startswith("["):
            host_part, bracket_end, after = authority.partition("]")
            if not bracket_end or (after and not after.startswith(":")):
                raise OriginError(f"host {show(authority)} is not a valid [IPv6] literal")
            host = parse_host(host_part + "]")
            port_text = after[1:] if after else None
        else:
            host_part, colon, port_text_raw = authority.partition(":")
            host = parse_host(host_part)
            port_text = port_text_raw if colon else None
        port = default_port if port_text is None else parse_port(port_text)
    except AddressError as err:
        raise OriginError(str(err)) from None
    return host, port


def origin_rule(value: object, path: str, problems: Problems) -> Any:
    """Schema rule: a URL that satisfies the origin rules, parsed into an ``Origin``."""
    if not isinstance(value, str):
        return problems.add(path, f"must be a URL string, got {show(value)}")
    try:
        return parse_origin(value)
    except OriginError as err:
        return problems.add(path, str(err))
