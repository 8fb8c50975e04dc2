"""Browser sessions of the web console: signed, expiring cookies, their CSRF tokens, login nonces.

Theory of operation (SPEC §12 "The console is not management"; OWASP's session and CSRF
cheat sheets). Logging in with the dashboard token opens a session: a random 128-bit id kept in
a bounded table with its expiry, and a cookie ``v1.<expiry>.<id>.<mac>`` whose MAC is
HMAC-SHA256 over the rest with a key drawn when the process starts (so a restart ends every
session, and a cookie cannot be forged or its expiry stretched). A cookie is accepted only when
its MAC verifies, it has not expired, and its id is still in the table: logout removes the id, so
a copied cookie dies with the session. The table holds at most ``SESSIONS_MAX`` sessions; a new
login past that evicts the one closest to expiry.

The CSRF token of a session is HMAC(key, "csrf/" + id): nothing to store, different per session,
unusable without the cookie it belongs to (a synchronizer token derived from the session).

Login nonces are the quickstart's one-click link: ``issue_nonce`` returns a random value that
one ``POST /login`` may exchange for a session within ``NONCE_TTL_S`` (10 minutes), once; only
its SHA-256 is kept, so the value is in memory only until printed.

The module reads no clock: every method takes ``now_s``, the caller's wall instant.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from dataclasses import dataclass
from typing import Final

SESSION_TTL_S: Final = 12 * 3600
SESSIONS_MAX: Final = 64
NONCE_TTL_S: Final = 600
NONCES_MAX: Final = 16
COOKIE_NAME: Final = "appliance_console"
COOKIE_BYTES_MAX: Final = 256
_VERSION: Final = "v1"
_ID_BYTES: Final = 16
_NONCE_BYTES: Final = 24


def _mac(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode("ascii"), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Session:
    """An open session: its id (also the pusher's key for its event streams) and expiry."""

    id: str
    expires_s: int
    csrf: str


class SessionBook:
    """Open sessions and login nonces of one console (thread-safe)."""

    def __init__(
        self,
        *,
        key: bytes | None = None,
        ttl_s: int = SESSION_TTL_S,
        sessions_max: int = SESSIONS_MAX,
        nonce_ttl_s: int = NONCE_TTL_S,
        nonces_max: int = NONCES_MAX,
    ) -> None:
        if ttl_s < 1 or sessions_max < 1 or nonce_ttl_s < 1 or nonces_max < 1:
            raise ValueError("session and nonce limits must be positive")
        self._key = key if key is not None else secrets.token_bytes(32)
        self.ttl_s = ttl_s
        self._sessions_max = sessions_max
        self._nonce_ttl_s = nonce_ttl_s
        self._nonces_max = nonces_max
        self._sessions: dict[str, int] = {}  # id -> expiry
        self._nonces: dict[bytes, int] = {}  # sha256(nonce) -> expiry
        self._lock = threading.Lock()

    # -- sessions --

    def open(self, now_s: float) -> tuple[Session, str]:
        """A new session and its cookie value."""
        session_id = secrets.token_hex(_ID_BYTES)
        expires_s = int(now_s) + self.ttl_s
        with self._lock:
            self._forget_expired(now_s)
            while len(self._sessions) >= self._sessions_max:
                oldest = min(self._sessions, key=self._sessions.__getitem__)
                del self._sessions[oldest]
            self._sessions[session_id] = expires_s
        body = f"{_VERSION}.{expires_s}.{session_id}"
        return self._session(session_id, expires_s), f"{body}.{_mac(self._key, body)}"

    def verify(self, cookie: str | None, now_s: float) -> Session | None:
        """The session a cookie value proves, or None (forged, expired, logged out, malformed)."""
        parsed = self.parse(cookie, now_s)
        if parsed is None:
            return None
        with self._lock:
            expires_s = self._sessions.get(parsed.id)
        if expires_s is None or expires_s != parsed.expires_s:
            return None
        return parsed

    def parse(self, cookie: str | None, now_s: float) -> Session | None:
        """The signed, unexpired session a cookie names, without looking at the table (the
        server's header-time check; ``verify`` also requires the session to be open)."""
        if cookie is None or len(cookie) > COOKIE_BYTES_MAX:
            return None
        parts = cookie.split(".")
        if len(parts) != 4 or parts[0] != _VERSION or not parts[1].isdigit():
            return None
        body = ".".join(parts[:3])
        if not hmac.compare_digest(_mac(self._key, body), parts[3]):
            return None
        expires_s = int(parts[1])
        if expires_s <= now_s:
            return None
        return self._session(parts[2], expires_s)

    def alive(self, session_id: str, now_s: float) -> bool:
        with self._lock:
            expires_s = self._sessions.get(session_id)
        return expires_s is not None and expires_s > now_s

    def close(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def csrf_ok(self, session: Session, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(session.csrf, token)

    def _session(self, session_id: str, expires_s: int) -> Session:
        return Session(session_id, expires_s, _mac(self._key, f"csrf/{session_id}"))

    def _forget_expired(self, now_s: float) -> None:
        for session_id in [s for s, e in self._sessions.items() if e <= now_s]:
            del self._sessions[session_id]

    # -- login nonces --

    def issue_nonce(self, now_s: float) -> str:
        """A single-use login nonce valid for ``NONCE_TTL_S`` (never logged; print it once)."""
        nonce = secrets.token_urlsafe(_NONCE_BYTES)
        with self._lock:
            for digest in [d for d, e in self._nonces.items() if e <= now_s]:
                del self._nonces[digest]
            while len(self._nonces) >= self._nonces_max:
                del self._nonces[min(self._nonces, key=self._nonces.__getitem__)]
            self._nonces[hashlib.sha256(nonce.encode()).digest()] = int(now_s) + self._nonce_ttl_s
        return nonce

    def redeem_nonce(self, nonce: str, now_s: float) -> bool:
        """True once for a nonce issued less than ``NONCE_TTL_S`` ago; it is gone afterwards."""
        digest = hashlib.sha256(nonce.encode("utf-8", "surrogateescape")).digest()
        with self._lock:
            expires_s = self._nonces.pop(digest, None)
        return expires_s is not None and expires_s > now_s

    def __repr__(self) -> str:
        return f"SessionBook(sessions={len(self._sessions)}, nonces={len(self._nonces)})"
