"""A credential value that never shows itself, compared in constant time.

A leaf module (it imports nothing of the appliance), so the HTTP layer, the Raft transport and
the config package can all hold secrets without importing one another.

A ``Secret`` never shows its value in ``str``/``repr``/``format``, refuses pickling and copying,
and exposes the value only through ``reveal()`` (for the HTTP client that sends it) and
``matches()`` (for the HTTP server that checks it, via ``hmac.compare_digest``).
"""

from __future__ import annotations

import hmac
from typing import NoReturn


class Secret:
    """A credential value that does not print itself."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The value, for the one place that must send it (an Authorization header)."""
        return self._value

    def matches(self, presented: str | bytes) -> bool:
        return matches(presented, self)

    def __repr__(self) -> str:
        return "Secret(<redacted>)"

    __str__ = __repr__

    def __format__(self, _spec: str) -> str:
        return repr(self)

    def __eq__(self, other: object) -> bool:
        # Equality would invite `==` on secrets (not constant time); compare with matches().
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Secret cannot be pickled")


def matches(presented: str | bytes, expected: Secret | str | bytes) -> bool:
    """Constant-time comparison of a presented bearer token with the expected credential."""
    if isinstance(expected, Secret):
        expected = expected.reveal()
    left = presented.encode("utf-8", "surrogateescape") if isinstance(presented, str) else presented
    right = expected.encode("utf-8", "surrogateescape") if isinstance(expected, str) else expected
    return hmac.compare_digest(left, right)
