"""Request headers: what a script may set, and what the worker always adds.

Theory of operation: a script's headers are validated (RFC 9110 token names, values without
CR, LF, NUL or other control characters, bounded in number and size) and lower-cased, because
the policy sees lower-case names only and one spelling avoids two meanings. A script may not set
the headers that frame or route the request (``Host``, ``Content-Length``, ``Transfer-Encoding``,
``Connection`` and friends, ``Proxy-*``) nor the two fencing headers the worker owns
(``Appliance-Invocation``, ``Appliance-Ownership-Epoch``): a receiver must be able to trust them.
It may replace ``Idempotency-Key`` (its own deduplication scheme wins), never empty it. The
headers a matching credential sets are refused by the exchange (credentials.py decides which).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from appliance.config.egress import HEADER_NAME_PATTERN
from appliance.egress.model import EgressInvocation
from appliance.egress.target import refused

HEADERS_MAX: Final = 64
HEADER_BYTES_MAX: Final = 16 * 1024  # names and values together, as sent
IDEMPOTENCY_KEY: Final = "idempotency-key"
APPLIANCE_INVOCATION: Final = "appliance-invocation"
APPLIANCE_OWNERSHIP_EPOCH: Final = "appliance-ownership-epoch"
USER_AGENT: Final = "appliance-egress/1"
SCRIPT_HEADERS_REFUSED: Final = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "expect",
        APPLIANCE_INVOCATION,
        APPLIANCE_OWNERSHIP_EPOCH,
    }
)
# Dropped from the script's headers when a followed redirect leaves the origin (as browsers do).
CROSS_ORIGIN_DROPPED: Final = frozenset({"authorization", "cookie", "proxy-authorization"})
_VALUE_REFUSED: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]|[^\x00-\xff]")


def script_headers(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """The script's headers, validated, names lower-case, in order; FetchFailed (refused)."""
    checked: list[tuple[str, str]] = []
    total_bytes = 0
    for pair in pairs:
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise refused("headers must be name and value pairs")
        name, value = pair
        if not isinstance(name, str) or not HEADER_NAME_PATTERN.fullmatch(name):
            raise refused(f"{_shown(name)} is not a valid header name")
        if not isinstance(value, str):
            raise refused(f"the value of header {name} must be a string")
        value = value.strip(" \t")
        if _VALUE_REFUSED.search(value):
            raise refused(
                f"the value of header {name} holds a control character (CR, LF, NUL...) or a "
                "character outside Latin-1"
            )
        lowered = name.lower()
        if lowered in SCRIPT_HEADERS_REFUSED or lowered.startswith("proxy-"):
            raise refused(f"a script may not set the {lowered} header")
        if lowered == IDEMPOTENCY_KEY and not value:
            raise refused("idempotency-key may be replaced, not emptied")
        checked.append((lowered, value))
        total_bytes += len(lowered) + len(value) + 4
        if len(checked) > HEADERS_MAX:
            raise refused(f"at most {HEADERS_MAX} headers")
        if total_bytes > HEADER_BYTES_MAX:
            raise refused(f"the headers exceed {HEADER_BYTES_MAX} bytes")
    if sum(1 for name, _ in checked if name == IDEMPOTENCY_KEY) > 1:
        raise refused("idempotency-key may be given once")
    return tuple(checked)


def outgoing_headers(
    script: tuple[tuple[str, str], ...], invocation: EgressInvocation, ordinal: int
) -> tuple[tuple[str, str], ...]:
    """What is sent (before credentials): the script's headers, the defaults it did not set,
    and the three idempotency and fencing headers."""
    names = {name for name, _ in script}
    added: list[tuple[str, str]] = []
    if "accept" not in names:
        added.append(("accept", "*/*"))
    if "user-agent" not in names:
        added.append(("user-agent", USER_AGENT))
    if "accept-encoding" not in names:  # what the client sends by default: say it to the policy
        added.append(("accept-encoding", "identity"))
    if IDEMPOTENCY_KEY not in names:
        added.append((IDEMPOTENCY_KEY, invocation.idempotency_key(ordinal)))
    added.append((APPLIANCE_INVOCATION, invocation.invocation_token()))
    added.append((APPLIANCE_OWNERSHIP_EPOCH, str(invocation.ownership_epoch)))
    return (*script, *added)


def as_object(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The policy's view: one entry per name, repeated values joined by ", " (RFC 9110 §5.3)."""
    joined: dict[str, str] = {}
    for name, value in headers:
        joined[name] = f"{joined[name]}, {value}" if name in joined else value
    return joined


def _shown(name: object) -> str:
    if not isinstance(name, str):
        return "a non-string"
    return repr(name[:40])
