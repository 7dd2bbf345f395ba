"""The operator page's sign-in sessions: stateless cookies that signing out revokes.

A cookie ``<expires>.<id>.<mac>`` is signed under a key derived from the token, so every worker
accepts any worker's. A revoked id is kept until its expiry in memory and in the cache's store
(without labels: no purge selects it), where the processes that did not revoke it read it."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

from ...core.entry import Entry
from ...stores import Store

SESSION_SECONDS = 12 * 3600
#: Revocations this process remembers; past it, the ones expiring first are forgotten first.
MAX_REVOKED = 10_000
_STORE_PREFIX = "adcp-stale-cache-admin:revoked:"


class Sessions:
    """Issue, check and revoke the operator page's session cookies."""

    def __init__(self, token: str, store: Store | None = None) -> None:
        self._key = hashlib.sha256(b"adcp-stale-cache admin session\n" + token.encode()).digest()
        self._store = store
        self._revoked: dict[str, int] = {}  # session id -> its expiry

    def issue(self) -> str:
        """A new session cookie's value."""
        return self._signed(int(time.time()) + SESSION_SECONDS, secrets.token_hex(16))

    async def valid(self, cookie: str) -> bool:
        """True for an unexpired, unrevoked cookie this app issued; never an error."""
        session = self._read(cookie)
        if session is None:
            return False
        expires, session_id = session
        if session_id in self._revoked:
            return False
        if self._store is None or await self._store.get(_STORE_PREFIX + session_id) is None:
            return True
        self._remember(session_id, expires)  # heard once: kept here, whatever the store does
        return False

    async def revoke(self, cookie: str) -> None:
        """Revoke ``cookie`` until its expiry, here and in the store (a forged one: nothing)."""
        session = self._read(cookie)
        if session is None:
            return
        expires, session_id = session
        self._remember(session_id, expires)
        if self._store is not None:
            now = time.time()
            await self._store.set(
                _STORE_PREFIX + session_id, Entry(b"revoked", now), expires - now + 1
            )

    def _remember(self, session_id: str, expires: int) -> None:
        now = time.time()
        for gone in [s for s, until in self._revoked.items() if until < now]:
            del self._revoked[gone]
        while len(self._revoked) >= MAX_REVOKED:
            del self._revoked[min(self._revoked, key=self._revoked.__getitem__)]
        self._revoked[session_id] = expires

    def _signed(self, expires: int, session_id: str) -> str:
        body = f"{expires}.{session_id}"
        return f"{body}.{hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()}"

    def _read(self, cookie: str) -> tuple[int, str] | None:
        expires, _, rest = cookie.partition(".")
        session_id = rest.partition(".")[0]
        # ASCII digits of a plausible time only: int() refuses 4,300 digits and more, and
        # reads digits of other scripts; an unauthenticated cookie is never an error.
        if not (expires.isascii() and expires.isdigit() and len(expires) <= 12):
            return None
        if not (len(session_id) == 32 and all(c in "0123456789abcdef" for c in session_id)):
            return None
        if int(expires) < time.time():
            return None
        signed = self._signed(int(expires), session_id)
        if not hmac.compare_digest(cookie.encode(), signed.encode()):
            return None
        return int(expires), session_id
