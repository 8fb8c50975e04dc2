"""The URL a script asks for, parsed once into what is sent, decided and recorded.

Theory of operation: the text is split by hand (``urlsplit`` is lenient about backslashes,
whitespace and odd ports) into scheme, host, port, path and query, and normalized the way a
browser's URL parser would before anything looks at it: scheme and host lower-case, the default
port explicit, the fragment dropped (it never leaves the client), ``.`` and ``..`` segments
resolved — percent-encoded ones too (``%2e``), as WHATWG URL does — and characters outside
visible ASCII percent-encoded as UTF-8. The policy, the credential match and the request line
all see the same normalized path, so ``/hooks/../admin`` can never match a credential's
``/hooks/`` prefix and then reach ``/admin``. Only ``http`` and ``https``; no userinfo; hosts
are ASCII names or IP literals (an IDN must be given in its ``xn--`` form).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

from appliance.config.addresses import AddressError, bracket, parse_host, parse_port
from appliance.egress.model import KIND_REFUSED, FetchFailed

URL_BYTES_MAX: Final = 8192
DEFAULT_PORTS: Final = {"https": 443, "http": 80}
_SCHEME: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_FORBIDDEN: Final = re.compile(r"[\x00-\x20\x7f\\]")
_SINGLE_DOT: Final = frozenset({".", "%2e"})
_DOUBLE_DOT: Final = frozenset({"..", ".%2e", "%2e.", "%2e%2e"})
# Kept as they are in a path or query; everything else outside visible ASCII is encoded.
_PATH_SAFE: Final = "/!$&'()*+,;=:@%-._~"
_QUERY_SAFE: Final = _PATH_SAFE + "?"


def refused(message: str) -> FetchFailed:
    return FetchFailed(KIND_REFUSED, message)


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # lower-case name or IP literal (IPv6 without brackets)
    port: int
    path: str  # normalized, starts with "/"
    query: str | None  # without the "?"; None when the URL has none

    @property
    def origin(self) -> str:
        port = "" if DEFAULT_PORTS[self.scheme] == self.port else f":{self.port}"
        return f"{self.scheme}://{bracket(self.host)}{port}"

    @property
    def url(self) -> str:
        return self.origin + self.request_target

    @property
    def url_without_query(self) -> str:
        """What the record keeps: a query often carries data that is not the operator's."""
        return self.origin + self.path

    @property
    def request_target(self) -> str:
        return self.path if self.query is None else f"{self.path}?{self.query}"

    @property
    def host_is_ip(self) -> bool:
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return False
        return True

    def same_origin(self, other: Target) -> bool:
        return (self.scheme, self.host, self.port) == (other.scheme, other.host, other.port)

    def parsed_json(self) -> dict[str, object]:
        """``url_parsed`` in the policy input."""
        return {
            "scheme": self.scheme,
            "host": self.host,
            "port": self.port,
            "path": self.path,
            "query": self.query if self.query is not None else "",
        }


def parse_target(text: str) -> Target:
    """The normalized target of an absolute URL; FetchFailed (refused) naming the problem."""
    if not isinstance(text, str) or not text:
        raise refused("the URL must be a non-empty string")
    if len(text.encode("utf-8", "replace")) > URL_BYTES_MAX:
        raise refused(f"the URL is longer than {URL_BYTES_MAX} bytes")
    if _FORBIDDEN.search(text):
        raise refused("the URL must not contain whitespace, control characters or backslashes")
    match = _SCHEME.match(text)
    if match is None:
        raise refused("the URL must be absolute (http: or https:)")
    scheme = match.group(1).lower()
    if scheme not in DEFAULT_PORTS:
        raise refused(f"only http: and https: URLs can be fetched, not {scheme}:")
    rest = text[match.end() :]
    if not rest.startswith("//"):
        raise refused("the URL must have an authority (scheme://host)")
    rest = rest[2:].split("#", 1)[0]
    authority, query = rest, None
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=-1)
    path = "/"
    if cut >= 0:
        authority, tail = rest[:cut], rest[cut:]
        path_part, question, query_part = tail.partition("?")
        path = path_part or "/"
        query = query_part if question else None
    host, port = _authority(authority, DEFAULT_PORTS[scheme])
    return Target(
        scheme=scheme,
        host=host,
        port=port,
        path=normalize_path(path),
        query=None if query is None else quote(query, safe=_QUERY_SAFE),
    )


def _authority(authority: str, default_port: int) -> tuple[str, int]:
    if "@" in authority:
        raise refused("the URL must not embed credentials (user:password@)")
    if not authority:
        raise refused("the URL must name a host")
    if not authority.isascii():
        raise refused("the host must be ASCII (give an internationalized name in its xn-- form)")
    try:
        if authority.startswith("["):
            inside, closed, after = authority[1:].partition("]")
            if not closed or (after and not after.startswith(":")):
                raise refused("the host is not a valid [IPv6] literal")
            host = parse_host(f"[{inside}]")
            port_text = after[1:] if after else None
        else:
            name, colon, port_raw = authority.partition(":")
            host = parse_host(name.lower().rstrip(".") if name != "." else name)
            port_text = port_raw if colon else None
        port = default_port if not port_text else parse_port(port_text)
    except AddressError as err:
        raise refused(f"the URL's host or port is not valid: {err}") from None
    return host, port


def normalize_path(path: str) -> str:
    """Dot segments resolved (encoded ones too) and non-ASCII percent-encoded; starts with /."""
    segments = path.split("/")[1:]
    kept: list[str] = []
    for i, segment in enumerate(segments):
        lowered = segment.lower()
        last = i == len(segments) - 1
        if lowered in _SINGLE_DOT:
            if last:
                kept.append("")
            continue
        if lowered in _DOUBLE_DOT:
            if kept:
                kept.pop()
            if last:
                kept.append("")
            continue
        kept.append(segment)
    return quote("/" + "/".join(kept), safe=_PATH_SAFE)


def resolve_location(base: Target, location: str) -> Target:
    """The target a redirect's ``Location`` names, relative to ``base`` (RFC 9110 §10.2.2)."""
    location = location.strip()
    if _SCHEME.match(location):
        return parse_target(location)
    if location.startswith("//"):
        return parse_target(f"{base.scheme}:{location}")
    if _FORBIDDEN.search(location):
        raise refused("the redirect's Location is not a valid URL")
    location = location.split("#", 1)[0]
    if location.startswith("/"):
        return parse_target(base.origin + location)
    if location.startswith("?"):
        return parse_target(base.origin + base.path + location)
    if not location:
        return parse_target(base.url)
    directory = base.path.rsplit("/", 1)[0]
    return parse_target(f"{base.origin}{directory}/{location}")
